//===- CudaEmulation.cpp - The fibers CUDA threads run on -----------------===//
//
// CudaEmulation.h's scheduler: a block's threads are fibers on the
// launching OS thread, each with its own stack, switched by a few
// instructions (x86-64: callee-saved registers, MXCSR and the x87 control
// word; ucontext elsewhere, whose switches are system calls). A fiber is
// created once and reused for every later block and launch: it runs the
// current kernel body, marks itself done and parks.
//
//===----------------------------------------------------------------------===//
#include "CudaEmulation.h"

#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace cuda_emulation::fibers {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;

#if defined(__x86_64__)
extern "C" void loomEmulationSwitch(void **save, void *load);
asm(R"(
  .text
  .globl loomEmulationSwitch
  .type loomEmulationSwitch, @function
loomEmulationSwitch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size loomEmulationSwitch, .-loomEmulationSwitch
)");
/// A saved context: the stack pointer loomEmulationSwitch left.
struct Context {
  void *sp = nullptr;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

/// One CUDA thread (a guard page below its stack turns an overflow into a
/// fault, not a corrupted neighbour).
struct Fiber {
  Context context;
  char *stack = nullptr;
  bool started = false, done = true;
  /// The scope it waits at (0: the block, 1 + w: warp w), -1 when runnable,
  /// and that scope's generation when it arrived.
  int waitScope = -1;
  unsigned waitGeneration = 0;
};

/// A barrier's state: threads arrived this generation, threads still live.
struct Scope {
  int arrived = 0, live = 0;
  unsigned generation = 0;
};

struct Scheduler {
  Context home;
  std::vector<Fiber> fibers;
  Scope block;
  std::vector<Scope> warps;
  unsigned current = 0;
  void (*body)(void *) = nullptr;
  void *bodyArg = nullptr;
  ~Scheduler() {
    for (Fiber &f : fibers)
      if (f.stack)
        munmap(f.stack, kStackBytes + kGuardBytes);
  }
};
thread_local Scheduler scheduler;

void switchTo(Context &save, Context &load) {
#if defined(__x86_64__)
  loomEmulationSwitch(&save.sp, load.sp);
#else
  swapcontext(&save.uc, &load.uc);
#endif
}

Scope &scopeAt(int index) {
  return index == 0 ? scheduler.block : scheduler.warps[index - 1];
}

/// Releases a scope whose every live thread has arrived.
void releaseIfComplete(Scope &s) {
  if (s.arrived > 0 && s.arrived == s.live) {
    s.arrived = 0;
    ++s.generation;
  }
}

/// A fiber's life: run the current body as thread `current`, leave the
/// scopes (an exited thread no longer counts at a barrier, as on the GPU),
/// park; resumed, run the next block's body.
[[noreturn]] void fiberMain() {
  for (;;) {
    Scheduler &S = scheduler;
    S.body(S.bodyArg);
    Fiber &f = S.fibers[S.current];
    f.done = true;
    --S.block.live;
    releaseIfComplete(S.block);
    Scope &warp = S.warps[S.current / 32];
    --warp.live;
    releaseIfComplete(warp);
    switchTo(f.context, S.home);
  }
}

/// The first context of a fiber: fiberMain on its own stack.
void start(Fiber &f) {
  if (!f.stack) {
    void *m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "CudaEmulation: no memory for a fiber stack\n");
      std::abort();
    }
    mprotect(m, kGuardBytes, PROT_NONE);
    f.stack = static_cast<char *>(m);
  }
  char *top = f.stack + kGuardBytes + kStackBytes; // 16-byte aligned
#if defined(__x86_64__)
  // What loomEmulationSwitch pops: the control words (MXCSR's and the x87's
  // defaults), six callee-saved registers, then `ret` into fiberMain, which
  // finds a (never used) return address above it, as after a call.
  auto *sp = reinterpret_cast<uint64_t *>(top);
  *--sp = 0;                                              // fiberMain's return
  *--sp = reinterpret_cast<uint64_t>(&fiberMain);         // ret target
  for (int r = 0; r < 6; ++r)
    *--sp = 0;                                            // rbp .. r15
  *--sp = 0x1F80ull | (0x037Full << 32);                  // mxcsr, fpu cw
  f.context.sp = sp;
#else
  getcontext(&f.context.uc);
  f.context.uc.uc_stack.ss_sp = f.stack + kGuardBytes;
  f.context.uc.uc_stack.ss_size = kStackBytes;
  f.context.uc.uc_link = nullptr;
  makecontext(&f.context.uc, reinterpret_cast<void (*)()>(&fiberMain), 0);
#endif
  f.started = true;
}

} // namespace

void arrive(int index) {
  Scope &s = scopeAt(index);
  ++s.arrived;
  if (s.arrived == s.live) {
    releaseIfComplete(s);
    return;
  }
  Fiber &f = scheduler.fibers[scheduler.current];
  f.waitScope = index;
  f.waitGeneration = s.generation;
  switchTo(f.context, scheduler.home);
}

void runBlock(unsigned threads, void (*body)(void *), void *arg) {
  Scheduler &S = scheduler;
  S.body = body;
  S.bodyArg = arg;
  if (S.fibers.size() < threads)
    S.fibers.resize(threads);
  S.block.arrived = 0;
  S.block.live = static_cast<int>(threads);
  S.warps.assign((threads + 31) / 32, Scope{});
  for (unsigned w = 0; w < S.warps.size(); ++w)
    S.warps[w].live = static_cast<int>(std::min(32u, threads - 32 * w));
  for (unsigned t = 0; t < threads; ++t) {
    Fiber &f = S.fibers[t];
    if (!f.started)
      start(f);
    f.done = false;
    f.waitScope = -1;
  }
  // Round robin: each turn runs a thread to its next barrier or its end.
  for (;;) {
    bool live = false, ran = false;
    for (unsigned t = 0; t < threads; ++t) {
      Fiber &f = S.fibers[t];
      if (f.done)
        continue;
      live = true;
      if (f.waitScope >= 0 &&
          scopeAt(f.waitScope).generation == f.waitGeneration)
        continue;
      f.waitScope = -1;
      S.current = t;
      threadIdx = {t, 0, 0};
      switchTo(S.home, f.context);
      ran = true;
    }
    if (!live)
      return;
    if (!ran) {
      std::fprintf(stderr,
                   "CudaEmulation: block %u deadlocked: threads wait at a "
                   "barrier that other live threads never reach\n",
                   blockIdx.x);
      std::abort();
    }
  }
}

} // namespace cuda_emulation::fibers
