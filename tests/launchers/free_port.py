"""A TCP port on 127.0.0.1 for a launcher test's meeting point, chosen so that no other socket takes it meanwhile.

A port the kernel hands out for bind(0) lies in the ephemeral range (net.ipv4.ip_local_port_range), where every
connect() of the parallel tests picks its local ports too, so it may be taken again before the job binds it. A port
below that range is never picked by connect(), and one below 20000 never by collie's ports derived from a job id
(src/core/launch_env.hpp, 20000-29999) either; the one returned here is free now, and with pair=True so is the next
one (a meeting point given as MASTER_PORT is served at MASTER_PORT + 1). Run as a script: prints such a pair's first.
"""
import random
import socket


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port(pair=False):
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    low, high = 10000, min(20000, ephemeral_low) - 1  # [low, high): port + 1 stays below both too
    for _ in range(200 if low < high else 0):
        port = random.randrange(low, high)
        if _bindable(port) and (not pair or _bindable(port + 1)):
            return port
    # No room below the ephemeral range: take what the kernel hands out.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1] - (1 if pair else 0)


if __name__ == "__main__":
    print(free_port(pair=True))
