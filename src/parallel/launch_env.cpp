#include "parallel/launch_env.h"

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "core/error.h"

namespace megadlm {

namespace {

// A launcher's number: decimal digits only, within [min_value, INT_MAX].
int parse_count(const char* name, const char* text, int min_value) {
  const std::string s(text);
  bool digits = !s.empty();
  for (char c : s) digits = digits && c >= '0' && c <= '9';
  long long v = -1;
  if (digits && s.size() <= 10) v = std::strtoll(s.c_str(), nullptr, 10);
  MEGADLM_CHECK(digits && v >= min_value && v <= INT_MAX, "environment variable ", name, "='", s,
                "' is not a whole number >= ", min_value, " (the launcher sets it; unset it or fix its value)");
  return static_cast<int>(v);
}

struct Reader {
  const EnvLookup& getenv;
  bool has(const char* name) const { return getenv(name) != nullptr; }
  // The variable's value, or `fallback` when it is not set.
  int count(const char* name, int min_value, int fallback) const {
    const char* v = getenv(name);
    return v ? parse_count(name, v, min_value) : fallback;
  }
};

// Slurm's compressed tasks-per-node list ("2(x3),1": three nodes of 2 tasks, then one of 1): the
// count of node `node`, or -1 when the list is shorter.
int tasks_on_node(const char* name, const std::string& list, int node) {
  size_t pos = 0;
  int index = 0;
  while (pos <= list.size()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, end - pos);
    const size_t paren = item.find("(x");
    const int tasks = parse_count(name, item.substr(0, paren).c_str(), 0);
    int repeat = 1;
    if (paren != std::string::npos) {
      MEGADLM_CHECK(item.back() == ')', "environment variable ", name, "='", list, "' is not Slurm's tasks-per-node list");
      repeat = parse_count(name, item.substr(paren + 2, item.size() - paren - 3).c_str(), 1);
    }
    if (node < index + repeat) return tasks;
    index += repeat;
    pos = end + 1;
  }
  return -1;
}

void read_open_mpi(const Reader& r, LaunchEnv& e) {
  e.launcher = Launcher::OpenMpi;
  e.world = r.count("OMPI_COMM_WORLD_SIZE", 1, 1);
  e.world_var = "OMPI_COMM_WORLD_SIZE";
  e.rank = r.count("OMPI_COMM_WORLD_RANK", 0, -1);
  e.rank_var = "OMPI_COMM_WORLD_RANK";
  if (r.has("OMPI_COMM_WORLD_LOCAL_RANK")) {
    e.local_rank = r.count("OMPI_COMM_WORLD_LOCAL_RANK", 0, -1);
    e.local_rank_var = "OMPI_COMM_WORLD_LOCAL_RANK";
  }
  e.local_size = r.count("OMPI_COMM_WORLD_LOCAL_SIZE", 1, -1);
}

void read_slurm(const Reader& r, LaunchEnv& e) {
  e.launcher = Launcher::Slurm;
  e.world = r.count("SLURM_STEP_NUM_TASKS", 1, 1);
  e.world_var = "SLURM_STEP_NUM_TASKS";
  e.rank = r.count("SLURM_PROCID", 0, 0);
  e.rank_var = "SLURM_PROCID";
  if (r.has("SLURM_LOCALID")) {
    e.local_rank = r.count("SLURM_LOCALID", 0, -1);
    e.local_rank_var = "SLURM_LOCALID";
  }
  e.node = r.count("SLURM_NODEID", 0, -1);
  const char* per_node = r.getenv("SLURM_STEP_TASKS_PER_NODE");
  if (per_node && e.node >= 0) e.local_size = tasks_on_node("SLURM_STEP_TASKS_PER_NODE", per_node, e.node);
}

void read_hydra(const Reader& r, LaunchEnv& e) {
  e.launcher = Launcher::Hydra;
  e.world = r.count("PMI_SIZE", 1, 0);
  e.world_var = e.world > 0 ? "PMI_SIZE" : "";
  e.rank = r.count("PMI_RANK", 0, -1);
  e.rank_var = e.rank >= 0 ? "PMI_RANK" : "";
  if (r.has("MPI_LOCALRANKID")) {
    e.local_rank = r.count("MPI_LOCALRANKID", 0, -1);
    e.local_rank_var = "MPI_LOCALRANKID";
  }
  e.local_size = r.count("MPI_LOCALNRANKS", 1, -1);
}

void read_pmix(const Reader& r, LaunchEnv& e) {
  e.launcher = Launcher::Pmix;
  e.world = 0;  // PMIx passes the size to MPI, not to the environment
  e.rank = r.count("PMIX_RANK", 0, -1);
  e.rank_var = "PMIX_RANK";
}

void check_ranges(const LaunchEnv& e) {
  MEGADLM_CHECK(e.world == 0 || e.rank < e.world, "environment variable ", e.rank_var, "=", e.rank,
                " is not below ", e.world_var, "=", e.world, " (a rank must be less than the number of ranks)");
  MEGADLM_CHECK(e.local_rank < 0 || e.local_size < 0 || e.local_rank < e.local_size, "environment variable ",
                e.local_rank_var, "=", e.local_rank, " is not below this node's ", e.local_size,
                " ranks (the launcher's local size)");
  MEGADLM_CHECK(e.world == 0 || e.local_size <= e.world, "the launcher puts ", e.local_size, " ranks on this node but ",
                e.world_var, "=", e.world, " in all");
}

}  // namespace

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::None: return "none";
    case Launcher::OpenMpi: return "openmpi";
    case Launcher::Slurm: return "slurm";
    case Launcher::Hydra: return "hydra";
    case Launcher::Pmix: return "pmix";
  }
  return "?";
}

LaunchEnv parse_launch_env(const EnvLookup& getenv) {
  const Reader r{getenv};
  LaunchEnv e;
  e.pmi = r.has("PMIX_RANK") || r.has("PMI_RANK") || r.has("PMI_SIZE") || r.has("PMI_FD");
  if (r.has("OMPI_COMM_WORLD_SIZE")) read_open_mpi(r, e);
  else if (r.has("SLURM_STEP_NUM_TASKS") && r.has("SLURM_PROCID")) read_slurm(r, e);
  else if (r.has("PMI_SIZE") || r.has("PMI_RANK") || r.has("MPI_LOCALNRANKS")) read_hydra(r, e);
  else if (r.has("PMIX_RANK")) read_pmix(r, e);
  else return e;
  if (e.local_rank < 0 && r.has("LOCAL_RANK")) {
    e.local_rank = r.count("LOCAL_RANK", 0, -1);
    e.local_rank_var = "LOCAL_RANK";
  }
  check_ranges(e);
  return e;
}

LaunchEnv process_launch_env() {
  return parse_launch_env([](const char* name) -> const char* { return std::getenv(name); });
}

bool wants_mpi(const LaunchEnv& env) {
  if (env.launcher == Launcher::None) return false;
  if (env.launcher == Launcher::Slurm) return env.world > 1 || env.pmi;
  return true;
}

void check_mpi_agrees(const LaunchEnv& env, int mpi_world, int mpi_rank) {
  if (env.launcher == Launcher::Slurm && env.world != mpi_world)
    fail("Slurm started ", env.world, " tasks (", env.world_var, "=", env.world, ", this is ", env.rank_var, "=",
         env.rank, ") but MPI's world has ", mpi_world, " rank", mpi_world == 1 ? "" : "s",
         ": MPI did not start through Slurm's process manager, so each task would train alone. Launch with "
         "`srun --mpi=pmix` (or --mpi=pmi2; `srun --mpi=list` shows what this cluster offers) and an MPI built "
         "with that support (docs/parallelism.md, \"Launch across machines\")");
  MEGADLM_CHECK(env.world == 0 || env.world == mpi_world, launcher_name(env.launcher), " launched ", env.world,
                " ranks (", env.world_var, "=", env.world, ") but MPI's world has ", mpi_world,
                ": the launcher and the MPI library do not belong together");
  MEGADLM_CHECK(env.rank < 0 || env.rank == mpi_rank, "this process is rank ", env.rank, " for its launcher (",
                env.rank_var, "=", env.rank, ") but rank ", mpi_rank, " in MPI's world");
}

std::string describe_launch(const LaunchEnv& env) {
  std::string s = std::string(launcher_name(env.launcher)) + ": rank " + std::to_string(env.rank) + " of " +
                  (env.world > 0 ? std::to_string(env.world) : std::string("?"));
  if (env.local_rank >= 0) {
    s += ", local rank " + std::to_string(env.local_rank);
    if (env.local_size > 0) s += " of " + std::to_string(env.local_size);
  }
  if (env.node >= 0) s += " on node " + std::to_string(env.node);
  return s;
}

}  // namespace megadlm
