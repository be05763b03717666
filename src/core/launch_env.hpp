// launch_env.hpp: how Communicator::createFromEnv (launch_env.cpp) finds where the ranks meet when the launcher
// started them without an address (no COLLIE_UNIQUE_ID, COLLIE_ROOT_ADDR or MASTER_ADDR/MASTER_PORT):
//   Slurm (srun):    rank 0's node is the first of SLURM_STEP_NODELIST; the port is derived from SLURM_JOB_ID
//                    and SLURM_STEP_ID, so every step of every job meets elsewhere. One-node steps meet on
//                    127.0.0.1. Also under srun --mpi=pmi2 (PMI_RANK/PMI_SIZE). Outside a step (a program run in
//                    the batch script itself) only a one-rank job has a meeting point; more ranks fail at once.
//   Open MPI:        all ranks on one host (OMPI_COMM_WORLD_LOCAL_SIZE == OMPI_COMM_WORLD_SIZE): 127.0.0.1 and a
//                    port derived from the job id (OMPI_MCA_ess_base_jobid, or PMIX_NAMESPACE). Across hosts
//                    nothing tells a rank where rank 0 runs: the user passes MASTER_ADDR/MASTER_PORT (mpirun -x).
// Derived ports lie in [kDerivedPortBase, kDerivedPortBase + kDerivedPortSpan), below Linux's ephemeral range.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace collie::core {

constexpr int kDerivedPortBase = 20000;
constexpr int kDerivedPortSpan = 10000;

/// The first host of a Slurm host list: "node[01-04,07],gpu5" -> "node01", "rack[2-3]-n[5,9]" -> "rack2-n5",
/// "alpha,beta" -> "alpha"; "" for an empty list.
std::string firstHostOfList(const std::string& hostlist);

/// A port in the derived range, the same for the same job identity on every host.
int derivedPort(const std::string& jobIdentity);

/// The meeting point a launcher implies (see the top of this file), "host:port"; "" when it implies none, with
/// why in *why (also when rank 0 finds itself elsewhere than the point says). *from names the variables it came
/// from, for the log and for errors.
std::string meetingPointOfLauncher(const std::string& launcher, int rank, int nranks, std::string* from,
                                   std::string* why);

/// COLLIE_SECRET, else a secret derived from rootAddr, nranks and every job id the meeting point's port may come
/// from (two jobs whose derived ports collide still get different secrets).
std::array<uint8_t, 16> secretFromEnv(const std::string& rootAddr, int nranks);

}  // namespace collie::core
