//===- EmulatedNcclSockets.cpp - Emulated NCCL ranks without mpirun -------===//
#include "EmulatedNcclSockets.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace loom::emulated_nccl {

namespace {

double timeoutSeconds() {
  const char *env = std::getenv("LOOM_EMULATED_NCCL_TIMEOUT");
  return env ? std::atof(env) : 120.0;
}

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "emulated NCCL: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

std::string lastError(const std::string &call) {
  return call + ": " + std::strerror(errno);
}

/// Moves `bytes` through `io` (a send or a recv of part of them), which
/// may move fewer than asked; false when the connection fails or closes.
template <typename Io> bool moveAll(uint8_t *p, size_t bytes, Io io) {
  while (bytes > 0) {
    const ssize_t n = io(p, bytes);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool writeAll(int fd, const void *data, size_t bytes) {
  // MSG_NOSIGNAL: a peer that died is an error here, not a SIGPIPE.
  return moveAll(
      const_cast<uint8_t *>(static_cast<const uint8_t *>(data)), bytes,
      [fd](uint8_t *p, size_t n) { return ::send(fd, p, n, MSG_NOSIGNAL); });
}

bool readAll(int fd, void *data, size_t bytes) {
  return moveAll(static_cast<uint8_t *>(data), bytes,
                 [fd](uint8_t *p, size_t n) { return ::recv(fd, p, n, 0); });
}

/// Small messages (a header, a scalar's all-reduce) leave at once instead of
/// waiting for the peer's acknowledgement of the last (Nagle's algorithm
/// against delayed ACKs: 40 ms a message).
void sendAtOnce(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/// A TCP socket in `fd` and the loopback address of `port` in `addr`.
bool loopbackSocket(uint16_t port, int &fd, sockaddr_in &addr,
                    std::string &error) {
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = lastError("socket");
    return false;
  }
  addr = sockaddr_in{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return true;
}

/// A listening loopback socket; `port` is where it listens.
bool openListener(int &fd, uint16_t &port, std::string &error) {
  sockaddr_in addr;
  if (!loopbackSocket(/*port=*/0, fd, addr, error)) // any free port
    return false;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 256) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    error = lastError("bind/listen on 127.0.0.1");
    ::close(fd);
    fd = -1;
    return false;
  }
  port = ntohs(addr.sin_port);
  return true;
}

/// The next connection to `listener`, within the timeout.
bool acceptOne(int listener, int &fd, std::string &error) {
  pollfd p{listener, POLLIN, 0};
  const int ms = static_cast<int>(timeoutSeconds() * 1000);
  int ready;
  do {
    ready = ::poll(&p, 1, ms);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) {
    error = ready == 0 ? "no rank connected within LOOM_EMULATED_NCCL_TIMEOUT"
                       : lastError("poll");
    return false;
  }
  fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    error = lastError("accept");
    return false;
  }
  sendAtOnce(fd);
  return true;
}

bool connectTo(uint16_t port, int &fd, std::string &error) {
  sockaddr_in addr;
  if (!loopbackSocket(port, fd, addr, error))
    return false;
  if (::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0) {
    error = lastError("connect to 127.0.0.1:" + std::to_string(port));
    ::close(fd);
    fd = -1;
    return false;
  }
  sendAtOnce(fd);
  return true;
}

/// What a rank says first on each connection it opens.
struct Hello {
  int32_t rank;
  uint16_t port; // its own listener (to rank 0 only)
};

/// One peer: the connection, and what its reader thread has received,
/// per channel, in order.
struct Peer {
  int fd = -1;
  std::mutex writing;
  std::mutex lock;
  std::condition_variable arrived;
  std::map<uint64_t, std::deque<std::vector<uint8_t>>> inbox;
  bool closed = false;
};

struct World {
  int rank = 0, size = 0;
  std::vector<std::unique_ptr<Peer>> peers; // peers[rank] is this rank
};

int gListener = -1;
World *gWorld = nullptr; // never freed: reader threads use it to the end

/// Reads `peer`'s messages (channel, length, bytes) into its inbox until
/// the connection closes.
void readMessages(Peer *peer) {
  for (;;) {
    uint64_t header[2];
    std::vector<uint8_t> body;
    bool ok = readAll(peer->fd, header, sizeof(header));
    if (ok) {
      body.resize(header[1]);
      ok = readAll(peer->fd, body.data(), body.size());
    }
    std::lock_guard<std::mutex> hold(peer->lock);
    if (!ok) {
      peer->closed = true;
      peer->arrived.notify_all();
      return;
    }
    peer->inbox[header[0]].push_back(std::move(body));
    peer->arrived.notify_all();
  }
}

} // namespace

bool listenForRanks(uint16_t &port, std::string &error) {
  closeListener();
  return openListener(gListener, port, error);
}

void closeListener() {
  if (gListener >= 0)
    ::close(gListener);
  gListener = -1;
}

bool connectWorld(int rank, int size, uint16_t port, std::string &error) {
  if (gWorld) {
    error = "this process already joined a world of " +
            std::to_string(gWorld->size) + " ranks";
    return false;
  }
  auto world = std::make_unique<World>();
  world->rank = rank;
  world->size = size;
  for (int r = 0; r < size; ++r)
    world->peers.push_back(std::make_unique<Peer>());
  auto fail = [&](const std::string &what) {
    error = "rank " + std::to_string(rank) + " of " + std::to_string(size) +
            ": " + what;
    for (auto &p : world->peers)
      if (p->fd >= 0)
        ::close(p->fd);
    return false;
  };
  std::vector<uint16_t> ports(size, 0);
  std::string why;
  if (rank == 0) {
    // 1. Rank 0 hears from every other rank on the port of the id, then
    //    tells each where all the others listen.
    if (gListener < 0)
      return fail("rank 0 joins with the id its own ncclGetUniqueId made");
    for (int i = 1; i < size; ++i) {
      int fd = -1;
      Hello hello{};
      if (!acceptOne(gListener, fd, why))
        return fail(why);
      if (!readAll(fd, &hello, sizeof(hello)) || hello.rank <= 0 ||
          hello.rank >= size || world->peers[hello.rank]->fd >= 0) {
        ::close(fd);
        return fail("a connection that is not a rank of this world");
      }
      world->peers[hello.rank]->fd = fd;
      ports[hello.rank] = hello.port;
    }
    for (int r = 1; r < size; ++r)
      if (!writeAll(world->peers[r]->fd, ports.data(),
                    ports.size() * sizeof(uint16_t)))
        return fail(lastError("sending the ports"));
    closeListener();
  } else {
    // 2. Every other rank listens, connects to rank 0, learns the ports,
    //    connects to the ranks below it and accepts those above it.
    int listener = -1;
    uint16_t own = 0;
    if (!openListener(listener, own, why))
      return fail(why);
    int fd = -1;
    const Hello hello{rank, own};
    if (!connectTo(port, fd, why)) {
      ::close(listener);
      return fail(why);
    }
    world->peers[0]->fd = fd;
    if (!writeAll(fd, &hello, sizeof(hello)) ||
        !readAll(fd, ports.data(), ports.size() * sizeof(uint16_t))) {
      ::close(listener);
      return fail("rank 0 closed the connection during the bootstrap");
    }
    for (int q = 1; q < rank; ++q) {
      if (!connectTo(ports[q], fd, why) ||
          !writeAll(fd, &hello, sizeof(hello))) {
        ::close(listener);
        return fail(why.empty() ? lastError("hello") : why);
      }
      world->peers[q]->fd = fd;
    }
    for (int i = rank + 1; i < size; ++i) {
      Hello from{};
      if (!acceptOne(listener, fd, why) || !readAll(fd, &from, sizeof(from)) ||
          from.rank <= rank || from.rank >= size ||
          world->peers[from.rank]->fd >= 0) {
        ::close(listener);
        return fail(why.empty() ? "a connection that is not a rank above"
                                : why);
      }
      world->peers[from.rank]->fd = fd;
    }
    ::close(listener);
  }
  for (int r = 0; r < size; ++r)
    if (r != rank)
      std::thread(readMessages, world->peers[r].get()).detach();
  gWorld = world.release();
  return true;
}

bool worldConnected() { return gWorld != nullptr; }

int worldRank() { return gWorld ? gWorld->rank : 0; }

void sendTo(int peer, uint64_t channel, const void *data, size_t bytes) {
  Peer &p = *gWorld->peers[peer];
  if (peer == gWorld->rank) {
    const auto *b = static_cast<const uint8_t *>(data);
    std::lock_guard<std::mutex> hold(p.lock);
    p.inbox[channel].emplace_back(b, b + bytes);
    return;
  }
  const uint64_t header[2] = {channel, bytes};
  std::lock_guard<std::mutex> hold(p.writing);
  if (!writeAll(p.fd, header, sizeof(header)) || !writeAll(p.fd, data, bytes))
    die("rank " + std::to_string(gWorld->rank) + " cannot send to rank " +
        std::to_string(peer) + " (" + lastError("send") +
        "): the peer is gone; on a device NCCL reports an error");
}

void receiveFrom(int peer, uint64_t channel, void *data, size_t bytes,
                 const char *what) {
  Peer &p = *gWorld->peers[peer];
  const double timeout = timeoutSeconds();
  std::unique_lock<std::mutex> hold(p.lock);
  auto &queue = p.inbox[channel];
  const bool got =
      p.arrived.wait_for(hold, std::chrono::duration<double>(timeout),
                         [&] { return !queue.empty() || p.closed; });
  if (queue.empty()) {
    const std::string who = "world rank " + std::to_string(gWorld->rank) +
                            " waited for " + what + " from world rank " +
                            std::to_string(peer);
    die(got ? who + ", which closed its connection (it ended)"
            : who + " for " + std::to_string(static_cast<int>(timeout)) +
                  " s (LOOM_EMULATED_NCCL_TIMEOUT): no matching call on the "
                  "same communicator; on a device this hangs");
  }
  std::vector<uint8_t> message = std::move(queue.front());
  queue.pop_front();
  hold.unlock();
  if (message.size() != bytes)
    die("world rank " + std::to_string(gWorld->rank) + " received " +
        std::to_string(message.size()) + " bytes from world rank " +
        std::to_string(peer) + " for " + what + " of " + std::to_string(bytes) +
        " bytes: the two ranks called different collectives or sizes");
  if (bytes > 0)
    std::memcpy(data, message.data(), bytes);
}

} // namespace loom::emulated_nccl
