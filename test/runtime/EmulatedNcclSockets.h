//===- EmulatedNcclSockets.h - Emulated NCCL ranks, no mpirun ---*- C++ -*-===//
//
// The transport of EmulatedNccl.cpp for ranks started without mpirun
// (loom-run with LOOM_RANK / LOOM_WORLD_SIZE / LOOM_NCCL_ID_FILE, as `loom`
// starts --backend cuda ranks): the processes of one job connected
// pairwise over loopback TCP, bootstrapped as NCCL bootstraps, through the
// ncclUniqueId. Rank 0's ncclGetUniqueId listens on a port and writes it
// into the id; every rank's ncclCommInitRank connects there, rank 0 sends
// back every rank's own listening port, and each pair of ranks connects.
//
// Messages carry a channel (the communicator's) and match in send order per
// peer and channel, NCCL's rule. A thread per peer reads its connection all
// the time, so a send (a blocking write) completes even when the peer is
// itself sending: two ranks that send to each other before receiving do
// not deadlock. Waiting past LOOM_EMULATED_NCCL_TIMEOUT seconds (120) for
// a message, or a peer that closes its connection, ends the process with a
// message saying which: on a device that would be a hang or an NCCL error.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_RUNTIME_EMULATEDNCCLSOCKETS_H
#define LOOM_TEST_RUNTIME_EMULATEDNCCLSOCKETS_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::emulated_nccl {

/// Rank 0's half of the bootstrap: listens on a loopback port for the
/// other ranks (the port goes into the ncclUniqueId). False with `error`
/// when the socket cannot be opened.
bool listenForRanks(uint16_t &port, std::string &error);

/// Forgets a listener that no job of several ranks used (a world of one).
void closeListener();

/// Connects this process as `rank` of `size` (> 1) to rank 0's `port`, and
/// every pair of ranks to each other. False with `error` on a failure or a
/// timeout; a process joins one such world only.
bool connectWorld(int rank, int size, uint16_t port, std::string &error);

/// Whether connectWorld succeeded in this process, and its rank there.
bool worldConnected();
int worldRank();

/// Sends `bytes` on `channel` to world rank `peer` (this rank too: it
/// receives its own messages in order). Returns once the bytes are written.
void sendTo(int peer, uint64_t channel, const void *data, size_t bytes);

/// Receives the next message from `peer` on `channel` into `data`; it must
/// be `bytes` long. `what` names the call in the message of a timeout.
void receiveFrom(int peer, uint64_t channel, void *data, size_t bytes,
                 const char *what);

} // namespace loom::emulated_nccl

#endif // LOOM_TEST_RUNTIME_EMULATEDNCCLSOCKETS_H
