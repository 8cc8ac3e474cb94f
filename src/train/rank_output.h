#pragma once
// Launching the tools under mpirun / srun: MPI is initialised (parallel/mpi_communicator.h), only rank
// 0 writes to stdout and stderr (the other ranks' log lines would repeat it N times), and a fatal
// error on any rank stops every rank with a non-zero status instead of leaving the others waiting
// forever in a collective.
#include <string>

namespace megadlm {

// init_distributed, then silences stdout and stderr on ranks other than 0 (their errors still go out
// through report_fatal). Returns the world size.
int start_ranks(int* argc, char*** argv);

// Prints "<prog>: <kind>: <message>" once and returns `code` for main (one rank), or ends every rank
// (MPI_Abort with `code`). The message is printed by rank 0 when rank 0 fails too (the usual case: a
// bad flag fails everywhere), else by the failing rank, prefixed "[rank r]".
int report_fatal(const char* prog, const char* kind, const std::string& message, int code);

}  // namespace megadlm
