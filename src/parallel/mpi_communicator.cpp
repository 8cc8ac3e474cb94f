#include "parallel/mpi_communicator.h"

// The C API only: OpenMPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace megadlm {

namespace {

bool g_initialized = false;

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("MPI ", what, " failed: ", std::string(msg, static_cast<size_t>(len)));
}

int to_int_count(int64_t n, const char* what) {
  MEGADLM_CHECK(n >= 0 && n <= INT_MAX, "MPI ", what, ": count ", n, " does not fit MPI's int count");
  return static_cast<int>(n);
}

// The MPI requests behind a CommRequest: one (a reduction) or two (an exchange); unused ones are null.
struct Requests {
  MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int size, int rank, std::string name)
      : Communicator(size, rank, std::move(name)), comm_(comm) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }

  // Ring estimates of the bytes one rank sends: all-reduce 2(p-1)/p, reduce-scatter and all-gather
  // (p-1)/p of the full buffer.
  double ring(double bytes, double factor) const { return size_ > 1 ? factor * bytes * (size_ - 1) / size_ : 0; }

  void all_reduce_sum(float* data, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n, 2));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, to_int_count(n, "all_reduce"), MPI_FLOAT, MPI_SUM, comm_), "Allreduce");
  }
  void all_reduce_sum(double* data, int64_t n) override {
    CommTimer t(stats_, ring(8.0 * n, 2));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, to_int_count(n, "all_reduce"), MPI_DOUBLE, MPI_SUM, comm_), "Allreduce");
  }
  void all_reduce_max(float* data, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n, 2));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, to_int_count(n, "all_reduce"), MPI_FLOAT, MPI_MAX, comm_), "Allreduce");
  }
  CommRequest all_reduce_sum_async(float* data, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n, 2));
    auto req = std::make_shared<Requests>();
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, to_int_count(n, "all_reduce"), MPI_FLOAT, MPI_SUM, comm_,
                             &req->r[0]),
              "Iallreduce");
    return CommRequest(std::static_pointer_cast<void>(req));
  }
  CommRequest send_recv_async(const void* send, int64_t send_bytes, int dst, void* recv, int64_t recv_bytes, int src,
                              int tag) override {
    CommTimer t(stats_, static_cast<double>(send_bytes));
    auto req = std::make_shared<Requests>();
    check_mpi(MPI_Irecv(recv, to_int_count(recv_bytes, "recv"), MPI_BYTE, src, tag, comm_, &req->r[0]), "Irecv");
    check_mpi(MPI_Isend(send, to_int_count(send_bytes, "send"), MPI_BYTE, dst, tag, comm_, &req->r[1]), "Isend");
    return CommRequest(std::static_pointer_cast<void>(req));
  }
  void wait(CommRequest& r) override {
    if (!r.pending()) return;
    const double t0 = CommTimer::now_s();
    auto* req = static_cast<Requests*>(r.impl().get());
    check_mpi(MPI_Waitall(2, req->r, MPI_STATUSES_IGNORE), "Waitall");
    stats_.seconds += CommTimer::now_s() - t0;
    r = CommRequest();
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n * size_, 1));
    check_mpi(MPI_Reduce_scatter_block(in, out, to_int_count(n, "reduce_scatter"), MPI_FLOAT, MPI_SUM, comm_),
              "Reduce_scatter_block");
  }
  void all_gather(const float* in, float* out, int64_t n) override {
    CommTimer t(stats_, ring(4.0 * n * size_, 1));
    check_mpi(MPI_Allgather(in, to_int_count(n, "all_gather"), MPI_FLOAT, out, static_cast<int>(n), MPI_FLOAT, comm_),
              "Allgather");
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    CommTimer t(stats_, rank_ == root ? static_cast<double>(bytes) : 0);
    check_mpi(MPI_Bcast(data, to_int_count(bytes, "broadcast"), MPI_BYTE, root, comm_), "Bcast");
  }
  void send(const void* data, int64_t bytes, int dst, int tag) override {
    CommTimer t(stats_, static_cast<double>(bytes));
    check_mpi(MPI_Send(data, to_int_count(bytes, "send"), MPI_BYTE, dst, tag, comm_), "Send");
  }
  void recv(void* data, int64_t bytes, int src, int tag) override {
    CommTimer t(stats_, 0);
    check_mpi(MPI_Recv(data, to_int_count(bytes, "recv"), MPI_BYTE, src, tag, comm_, MPI_STATUS_IGNORE), "Recv");
  }
  void all_to_all_v(const float* send, const int64_t* send_counts, float* recv, const int64_t* recv_counts) override {
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    int64_t so = 0, ro = 0;
    double sent = 0;
    for (int r = 0; r < size_; ++r) {
      sc[r] = to_int_count(send_counts[r], "all_to_all_v");
      rc[r] = to_int_count(recv_counts[r], "all_to_all_v");
      sd[r] = to_int_count(so, "all_to_all_v offset");
      rd[r] = to_int_count(ro, "all_to_all_v offset");
      so += send_counts[r];
      ro += recv_counts[r];
      if (r != rank_) sent += 4.0 * send_counts[r];
    }
    CommTimer t(stats_, sent);
    check_mpi(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT, comm_),
              "Alltoallv");
  }
  void barrier() override {
    CommTimer t(stats_, 0);
    check_mpi(MPI_Barrier(comm_), "Barrier");
  }

 private:
  MPI_Comm comm_;
};

}  // namespace

const LaunchEnv& launch_environment() {
  static const LaunchEnv env = process_launch_env();
  return env;
}

bool launched_by_mpi() { return wants_mpi(launch_environment()); }

namespace {

NodePlacement g_placement;

// The ranks sharing memory form a node; its lowest world rank leads it, and the leaders, ordered by
// world rank, number the nodes.
NodePlacement find_placement() {
  NodePlacement p;
  const int rank = world_rank();
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "Comm_split_type");
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &p.local_size);
  MPI_Comm leaders;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, p.local_rank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders), "Comm_split");
  int numbering[2] = {0, 1};
  if (p.local_rank == 0) {
    MPI_Comm_rank(leaders, &numbering[0]);
    MPI_Comm_size(leaders, &numbering[1]);
    MPI_Comm_free(&leaders);
  }
  check_mpi(MPI_Bcast(numbering, 2, MPI_INT, 0, node), "Bcast");
  MPI_Comm_free(&node);
  p.node = numbering[0];
  p.nodes = numbering[1];
  return p;
}

}  // namespace

int init_distributed(int* argc, char*** argv) {
  if (g_initialized) return world_size();
  const LaunchEnv& env = launch_environment();
  if (!wants_mpi(env)) return 1;
  int provided = 0;
  check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "Init_thread");
  MEGADLM_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI provides thread level ", provided, ", FUNNELED is needed");
  // Errors come back as return codes (turned into Error with MPI's message) instead of aborting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  g_initialized = true;
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
  check_mpi_agrees(env, world_size(), world_rank());
  g_placement = find_placement();
  return world_size();
}

bool distributed_initialized() { return g_initialized; }

int world_size() {
  if (!g_initialized) return 1;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int world_rank() {
  if (!g_initialized) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int local_rank() {
  if (!g_initialized) return 0;
  const LaunchEnv& env = launch_environment();
  return env.local_rank >= 0 ? env.local_rank : g_placement.local_rank;
}

const NodePlacement& node_placement() { return g_placement; }

std::string describe_ranks() {
  const LaunchEnv& env = launch_environment();
  if (env.launcher == Launcher::None) return "";
  std::string s = describe_launch(env);
  if (g_initialized) {
    const NodePlacement& p = node_placement();
    s += "; MPI: rank " + std::to_string(world_rank()) + " of " + std::to_string(world_size()) + ", local rank " +
         std::to_string(p.local_rank) + " of " + std::to_string(p.local_size) + " on node " + std::to_string(p.node) +
         " of " + std::to_string(p.nodes);
  } else {
    s += "; no MPI (one process)";
  }
  return s;
}

void abort_distributed(int code) {
  if (g_initialized && world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

std::shared_ptr<Communicator> world_communicator() {
  if (!g_initialized) return std::make_shared<SelfCommunicator>("world");
  return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, world_size(), world_rank(), "world");
}

std::shared_ptr<Communicator> split_world(int color, int key, const std::string& name) {
  if (!g_initialized) return std::make_shared<SelfCommunicator>(name);
  MPI_Comm c;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c), "Comm_split");
  int size = 1, rank = 0;
  MPI_Comm_size(c, &size);
  MPI_Comm_rank(c, &rank);
  return std::make_shared<MpiCommunicator>(c, size, rank, name);
}

}  // namespace megadlm
