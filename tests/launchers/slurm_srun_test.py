#!/usr/bin/env python3
"""slurm_srun_test.py: collie ranks started by a real Slurm (slurm-wlm), not by its variables set by hand.

The test brings up a one-host cluster of its own in a temp dir: munged (its own key and socket), slurmctld and
slurmd (their own slurm.conf, ports picked free, state and spool in the temp dir, all in the foreground), then runs
`srun -n 4` of env_allreduce (a collie program: init from the launcher's environment, two AllReduces checked
element by element) two or three times:
  1. with no address at all: the ranks meet where srun's own variables say (src/core/launch_env.hpp);
  2. the same under `srun --mpi=pmi2` (PMI_RANK/PMI_SIZE set too), where Slurm has the pmi2 plugin;
  3. with MASTER_ADDR/MASTER_PORT exported, as NCCL and torch.distributed users pass them.
Each must print "env_allreduce ok: rank R of 4" once for every R in 0..3 and exit 0.

The daemons never outlive the test: this process is a child subreaper (orphaned slurmstepd and tasks come back
to it), and on every exit, failure and SIGTERM included, it stops the daemons and kills whatever descends from it,
then checks that nothing is left. Skips (exit 77) saying why where slurm-wlm or munge is missing or not root.

  slurm_srun_test.py PATH/TO/collie_env_allreduce
"""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from free_port import free_port  # this directory: sys.path[0]

SKIP = 77
RANKS = 4
DEADLINE_S = 50  # the whole test; CTest's own timeout is above it
PR_SET_CHILD_SUBREAPER = 36


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def find(prog):
    return shutil.which(prog) or shutil.which(prog, path="/usr/sbin:/sbin")


def descendants():
    """Pids of every live process whose parent chain leads to this one (orphans come back here: subreaper)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z":
            parent[int(entry)] = int(fields[1])
    me, found = os.getpid(), []
    for pid in parent:
        p = pid
        while p in parent and p > 1:
            p = parent[p]
            if p == me:
                found.append(pid)
                break
    return found


class Cluster:
    """munged, slurmctld and slurmd of one host, in a temp dir; stop() leaves no process behind."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(tmp, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    def start(self):
        key = os.path.join(self.tmp, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        sock = os.path.join(self.tmp, "munge.socket")
        self.spawn("munged", [find("munged"), "-F", "--force", f"--key-file={key}", f"--socket={sock}",
                              f"--pid-file={self.tmp}/munged.pid", f"--log-file={self.tmp}/munged.log",
                              f"--seed-file={self.tmp}/munged.seed"])
        self.wait_for(lambda: os.path.exists(sock), "munged's socket")
        for d in ("state", "spool"):
            os.mkdir(os.path.join(self.tmp, d))
        with open(self.conf, "w") as f:
            f.write(f"""# collie's one-host test cluster (tests/launchers/slurm_srun_test.py)
ClusterName=collietest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={self.tmp}/state
SlurmdSpoolDir={self.tmp}/spool
SlurmctldPidFile={self.tmp}/slurmctld.pid
SlurmdPidFile={self.tmp}/slurmd.pid
SlurmctldLogFile={self.tmp}/slurmctld.log
SlurmdLogFile={self.tmp}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/builtin
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={RANKS} State=UNKNOWN
PartitionName=test Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
        self.spawn("slurmctld", [find("slurmctld"), "-D", "-i", "-f", self.conf])
        self.spawn("slurmd", [find("slurmd"), "-D", "-f", self.conf, "-N", self.host])
        self.wait_for(self.node_idle, "the node to register idle with slurmctld")

    def spawn(self, name, argv):
        log = open(os.path.join(self.tmp, f"{name}.out"), "w")
        self.procs.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)))

    def node_idle(self):
        r = subprocess.run([find("sinfo"), "-h", "-n", self.host, "-o", "%T"], env=self.env, capture_output=True,
                           text=True, timeout=10)
        return r.returncode == 0 and r.stdout.strip() == "idle"

    def wait_for(self, ready, what, timeout_s=25):
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode} while waiting for {what}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")

    def stop(self):
        """Stops the daemons (TERM, then KILL), then every process left below this one; returns the survivors."""
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in descendants():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + 3
            while descendants() and time.monotonic() < end:
                reap()
                time.sleep(0.1)
        reap()
        return descendants()

    def logs(self):
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = os.path.join(self.tmp, name)
            if os.path.exists(path):
                with open(path) as f:
                    tail = f.readlines()[-15:]
                print(f"--- {name} (last lines)\n{''.join(tail)}", end="")


def reap():
    """Collects exited orphans (they are our children now) so they do not linger as zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def has_mpi_plugin(cluster, name):
    r = subprocess.run([find("srun"), "--mpi=list"], env=cluster.env, capture_output=True, text=True, timeout=10)
    return any(line.split()[-1:] == [name] for line in (r.stdout + r.stderr).splitlines())


def run_job(cluster, prog, what, extra_env, srun_options=()):
    """srun -n 4 of prog; checks every rank 0..3 said ok exactly once."""
    env = {k: v for k, v in cluster.env.items()
           if not k.startswith(("COLLIE_", "MASTER_", "SLURM_", "OMPI_", "PMI_")) and k not in ("RANK", "WORLD_SIZE")}
    # A short COLLIE_TIMEOUT: a rank left waiting fails well within srun's --time and this test's deadline.
    env.update(SLURM_CONF=cluster.conf, COLLIE_DEBUG="INFO", COLLIE_TIMEOUT="20000", **extra_env)
    argv = [find("srun"), "-n", str(RANKS), "-N", "1", "--kill-on-bad-exit=1", "--time=1", *srun_options, prog]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    oks = sorted(line for line in r.stdout.splitlines() if line.startswith("env_allreduce ok"))
    want = sorted(f"env_allreduce ok: rank {i} of {RANKS}" for i in range(RANKS))
    derived = "derived from Slurm" in r.stderr
    if "--mpi=pmi2" in srun_options and "init from PMI" not in r.stderr:
        print(f"FAILED: srun ({what}): the ranks did not take their rank from PMI_RANK")
        derived = None
    if r.returncode != 0 or oks != want or derived != (not extra_env):
        print(f"FAILED: srun ({what}): exit {r.returncode}, ok lines {oks}, meeting point derived: {derived}")
        print(f"--- stdout\n{r.stdout}--- stderr\n{r.stderr[-3000:]}")
        return False
    print(f"srun -n {RANKS} ({what}): every rank ok{', meeting point derived from srun' if derived else ''}")
    return True


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    prog = os.path.abspath(sys.argv[1])
    missing = [p for p in ("munged", "slurmctld", "slurmd", "srun", "sinfo") if not find(p)]
    if missing:
        skip(f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        skip("slurmd must run as root to start tasks (run the test as root)")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        skip("cannot become a child subreaper, so slurmstepd could escape the clean-up")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("SIGTERM: stopping the cluster"))
    signal.signal(signal.SIGALRM, lambda *_: sys.exit(f"FAILED: over {DEADLINE_S} s"))
    signal.alarm(DEADLINE_S)
    tmp = tempfile.mkdtemp(prefix="collie-slurm-")
    cluster = Cluster(tmp)
    ok = False
    try:
        t0 = time.monotonic()
        cluster.start()
        print(f"cluster up in {time.monotonic() - t0:.1f} s (munged, slurmctld, slurmd; {tmp})")
        ok = run_job(cluster, prog, "no address: srun's variables", {})
        if has_mpi_plugin(cluster, "pmi2"):
            ok = run_job(cluster, prog, "no address, --mpi=pmi2", {}, ("--mpi=pmi2",)) and ok
        else:
            print("srun --mpi=pmi2: not run, this Slurm has no pmi2 plugin")
        # collie binds MASTER_PORT+1 (torchrun's store holds MASTER_PORT): that one is the port found free.
        ok = run_job(cluster, prog, "MASTER_ADDR/MASTER_PORT exported",
                     {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port(pair=True))}) and ok
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"FAILED: {e}")
    finally:
        signal.alarm(0)
        if not ok:
            cluster.logs()
        left = cluster.stop()
        if left:
            print(f"FAILED: processes outlived the test: {left}")
            ok = False
        shutil.rmtree(tmp, ignore_errors=True)
    print("slurm_srun_test: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
