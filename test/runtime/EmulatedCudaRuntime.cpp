//===- EmulatedCudaRuntime.cpp - The CUDA runtime calls, on host memory ---===//
//
// Definitions of the CUDA runtime API calls the backend makes (cuda_memory,
// device, tensor_movement, cuda_kernels, comm_nccl, the launchers'
// temporaries and the tests' DeviceVector), for loom_cuda_emulated: the CUDA
// backend's host code, unchanged, with its kernels on CudaEmulation.h's host
// threads and this file instead of libcudart. A node has LOOM_EMULATED_DEVICES
// devices (8 by default), all the same host memory; every call
// completes before it returns, so streams and events order nothing (a
// missing event wait is not caught here, only on a device).
//
// What it does check, as the real runtime would fail on a device:
//   - cudaMemcpy kinds against where the pointers are (device memory is
//     what cudaMalloc / cudaMallocAsync returned, pinned host memory what
//     cudaHostAlloc returned, anything else pageable host memory);
//   - copies whose source and destination overlap (undefined in CUDA);
//   - frees of pointers the runtime did not hand out, and double frees;
//   - reads before writes: fresh device memory is all-ones bytes (NaN as
//     fp32 and bf16), not the zeros of a host's fresh pages;
//   - accesses past the end: each device allocation ends at a page that
//     faults (after at most the 255 bytes of its 256-byte rounding);
//   - device memory still allocated is reported at exit on stderr, with
//     the allocation and copy counts.
//
//===----------------------------------------------------------------------===//
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>

namespace {

enum class Space { Device, Pinned };

struct Allocation {
  size_t bytes;
  Space space;
  /// Device memory: the mapping it lies at the end of, guard page included.
  void *mapping = nullptr;
  size_t mappingBytes = 0;
};

/// Every live allocation by start address (device and pinned host), and
/// what the process did, reported at exit (the proof a run used it).
struct Registry {
  std::mutex m;
  std::map<uintptr_t, Allocation> live;
  uint64_t deviceBytes = 0, peakDeviceBytes = 0;
  uint64_t deviceAllocations = 0, copies = 0;
  cudaError_t lastError = cudaSuccess;
  ~Registry() {
    if (deviceAllocations == 0)
      return;
    std::fprintf(stderr,
                 "emulated CUDA runtime: %llu device allocations (peak "
                 "%.1f MiB: %llu bytes), %llu copies, %llu bytes still "
                 "allocated\n",
                 static_cast<unsigned long long>(deviceAllocations),
                 peakDeviceBytes / 1048576.0,
                 static_cast<unsigned long long>(peakDeviceBytes),
                 static_cast<unsigned long long>(copies),
                 static_cast<unsigned long long>(deviceBytes));
  }
};

Registry &registry() {
  static Registry r;
  return r;
}

/// Records `e` as the sticky last error (cudaGetLastError) and returns it.
cudaError_t fail(cudaError_t e) {
  registry().lastError = e;
  return e;
}

cudaError_t allocate(void **ptr, size_t bytes, Space space) {
  if (!ptr)
    return fail(cudaErrorInvalidValue);
  // 256-byte alignment, as cudaMalloc guarantees.
  const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
  Allocation a{bytes, space};
  void *p = nullptr;
  if (space == Space::Device) {
    // Device memory ends at an inaccessible page (at most 255 bytes of
    // cudaMalloc's rounding between), so a kernel that runs past the end
    // of an allocation faults here instead of reading or overwriting the
    // host heap's next block.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    a.mappingBytes = (rounded + page - 1) / page * page + page;
    a.mapping = mmap(nullptr, a.mappingBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a.mapping == MAP_FAILED)
      return fail(cudaErrorMemoryAllocation);
    char *guard = static_cast<char *>(a.mapping) + a.mappingBytes - page;
    mprotect(guard, page, PROT_NONE);
    p = guard - rounded;
    // Fresh device memory holds whatever was there; a host's fresh pages
    // are zeros, which would hide a kernel that reads before anything
    // wrote. All-ones bytes are NaN as fp32 and as bf16, and -1 as an
    // integer.
    std::memset(p, 0xFF, rounded);
  } else {
    p = std::aligned_alloc(256, rounded);
    if (!p)
      return fail(cudaErrorMemoryAllocation);
  }
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  r.live[reinterpret_cast<uintptr_t>(p)] = a;
  if (space == Space::Device) {
    r.deviceBytes += bytes;
    r.peakDeviceBytes = std::max(r.peakDeviceBytes, r.deviceBytes);
    ++r.deviceAllocations;
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t release(void *ptr, Space space) {
  if (!ptr)
    return cudaSuccess;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  auto it = r.live.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == r.live.end() || it->second.space != space)
    return fail(cudaErrorInvalidValue);
  const Allocation a = it->second;
  r.live.erase(it);
  if (space == Space::Device) {
    r.deviceBytes -= a.bytes;
    munmap(a.mapping, a.mappingBytes);
  } else {
    std::free(ptr);
  }
  return cudaSuccess;
}

/// Whether [p, p + bytes) lies inside one device allocation.
bool onDevice(const void *p, size_t bytes) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = r.live.upper_bound(addr);
  if (it == r.live.begin())
    return false;
  --it;
  return it->second.space == Space::Device && addr >= it->first &&
         addr + bytes <= it->first + it->second.bytes;
}

/// Whether any byte of [p, p + bytes) is device memory (a host range must
/// have none).
bool touchesDevice(const void *p, size_t bytes) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = r.live.upper_bound(addr + (bytes > 0 ? bytes - 1 : 0));
  while (it != r.live.begin()) {
    --it;
    if (it->first + it->second.bytes <= addr)
      break;
    if (it->second.space == Space::Device)
      return true;
  }
  return false;
}

/// The checks of the file comment for a copy of `bytes` bytes.
cudaError_t checkCopy(void *dst, const void *src, size_t bytes,
                      cudaMemcpyKind kind) {
  if (bytes == 0)
    return cudaSuccess;
  if (!dst || !src)
    return fail(cudaErrorInvalidValue);
  const bool dstDevice = kind == cudaMemcpyHostToDevice ||
                         kind == cudaMemcpyDeviceToDevice;
  const bool srcDevice = kind == cudaMemcpyDeviceToHost ||
                         kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault) {
    if (dstDevice ? !onDevice(dst, bytes) : touchesDevice(dst, bytes))
      return fail(cudaErrorInvalidValue);
    if (srcDevice ? !onDevice(src, bytes) : touchesDevice(src, bytes))
      return fail(cudaErrorInvalidValue);
  }
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  if (d < s + bytes && s < d + bytes)
    return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

/// Streams are tokens: work completes when it is issued.
struct Token {
  int unused = 0;
};

/// An event: when it was last recorded (the host's clock; every earlier
/// piece of work has run by then), for cudaEventElapsedTime.
struct EmulatedEvent {
  bool timing = true, recorded = false;
  std::chrono::steady_clock::time_point at;
};

} // namespace

//===----------------------------------------------------------------------===//
// Devices and errors
//===----------------------------------------------------------------------===//

/// Devices per node: LOOM_EMULATED_DEVICES, else 8 (an HGX node), so
/// several ranks of one node each get one, as loom-run requires.
int deviceCount() {
  const char *env = std::getenv("LOOM_EMULATED_DEVICES");
  const int n = env ? std::atoi(env) : 8;
  return n > 0 ? n : 0;
}

cudaError_t cudaGetDeviceCount(int *count) {
  if (!count)
    return fail(cudaErrorInvalidValue);
  *count = deviceCount();
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

/// The calling thread's device, as the runtime keeps it per thread.
thread_local int currentDevice = 0;

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= deviceCount())
    return fail(cudaErrorInvalidDevice);
  currentDevice = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  if (!device)
    return fail(cudaErrorInvalidValue);
  *device = currentDevice;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

/// The memory attributes of an H100 SXM (2619 MHz, 5120 bits: 3352 GB/s),
/// so a trace's roofline metadata (loom-run --trace) is written and read
/// under emulation too; any other attribute is not emulated.
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr,
                                   int device) {
  if (!value)
    return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= deviceCount())
    return fail(cudaErrorInvalidDevice);
  switch (attr) {
  case cudaDevAttrMemoryClockRate:
    *value = 2619000;
    return cudaSuccess;
  case cudaDevAttrGlobalMemoryBusWidth:
    *value = 5120;
    return cudaSuccess;
  default:
    return fail(cudaErrorInvalidValue);
  }
}

/// A device no peak table knows (device.h's bf16PeakTflops gives 0).
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (!prop || device < 0 || device >= deviceCount())
    return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "CudaEmulation host device %d",
                device);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  Registry &r = registry();
  cudaError_t e = r.lastError;
  r.lastError = cudaSuccess;
  return e;
}

const char *cudaGetErrorName(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorInvalidValue:
    return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidDevice:
    return "cudaErrorInvalidDevice";
  case cudaErrorNoDevice:
    return "cudaErrorNoDevice";
  default:
    return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "no error";
  case cudaErrorInvalidValue:
    return "invalid argument (emulated runtime: a copy kind that does not "
           "match where the pointers are, overlapping copy ranges, or a "
           "pointer it did not allocate)";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  case cudaErrorInvalidDevice:
    return "invalid device ordinal (LOOM_EMULATED_DEVICES sets the emulated "
           "runtime's device count, 8 by default)";
  case cudaErrorNoDevice:
    return "no CUDA-capable device is detected (LOOM_EMULATED_DEVICES=0)";
  default:
    return "unknown error";
  }
}

cudaError_t cudaMemGetInfo(size_t *freeBytes, size_t *totalBytes) {
  // An H200's 141 GB.
  const size_t total = size_t(141) << 30;
  if (totalBytes)
    *totalBytes = total;
  if (freeBytes) {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.m);
    *freeBytes = total - static_cast<size_t>(r.deviceBytes);
  }
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  return allocate(devPtr, size, Space::Device);
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t) {
  return allocate(devPtr, size, Space::Device);
}

cudaError_t cudaFree(void *devPtr) { return release(devPtr, Space::Device); }

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t) {
  return release(devPtr, Space::Device);
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int) {
  return allocate(pHost, size, Space::Pinned);
}

cudaError_t cudaFreeHost(void *ptr) { return release(ptr, Space::Pinned); }

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                       cudaMemcpyKind kind) {
  cudaError_t e = checkCopy(dst, src, count, kind);
  if (e == cudaSuccess && count > 0) {
    std::memcpy(dst, src, count);
    ++registry().copies;
  }
  return e;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t) {
  if (width > dpitch || width > spitch)
    return fail(cudaErrorInvalidPitchValue);
  for (size_t row = 0; row < height; ++row) {
    cudaError_t e = cudaMemcpy(static_cast<char *>(dst) + row * dpitch,
                               static_cast<const char *>(src) + row * spitch,
                               width, kind);
    if (e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                            cudaStream_t) {
  if (count == 0)
    return cudaSuccess;
  if (!onDevice(devPtr, count))
    return fail(cudaErrorInvalidValue);
  std::memset(devPtr, value, count);
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// Streams and events
//===----------------------------------------------------------------------===//

cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
  if (!pStream)
    return fail(cudaErrorInvalidValue);
  *pStream = reinterpret_cast<cudaStream_t>(new Token);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int) {
  return cudaStreamCreate(pStream);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete reinterpret_cast<Token *>(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event,
                                unsigned int) {
  return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  if (!event)
    return fail(cudaErrorInvalidValue);
  auto *e = new EmulatedEvent;
  e->timing = (flags & cudaEventDisableTiming) == 0;
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<EmulatedEvent *>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (!event)
    return fail(cudaErrorInvalidResourceHandle);
  auto *e = reinterpret_cast<EmulatedEvent *>(event);
  e->recorded = true;
  e->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}

/// The host time between the two records: work before a record has run
/// when the record is issued, so that is the time of the work between.
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  if (!ms || !start || !end)
    return fail(!ms ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
  const auto *a = reinterpret_cast<EmulatedEvent *>(start);
  const auto *b = reinterpret_cast<EmulatedEvent *>(end);
  // As CUDA: events without timing, or never recorded, have no time.
  if (!a->timing || !b->timing || !a->recorded || !b->recorded)
    return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

/// Work runs when it is issued, so every recorded event has fired.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
