/* A stand-in libcuda.so.1 for running Triton's host path on a machine without a GPU
   (benchmarks/stub_cuda.py builds and loads it): every driver call Triton's driver module and
   launchers make succeeds at once and does nothing; out-parameters get an H100's values (sm_90,
   132 SMs); a pointer's device address is itself (unified addressing). `stub_launches` counts
   the kernel launches, which is how a caller knows the launcher reached the driver. */
#include <stdint.h>
#include <stddef.h>
#include <string.h>
typedef int CUresult;
uint64_t stub_launches = 0;
CUresult cuInit(unsigned flags) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 12080; return 0; }
CUresult cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGetAttribute(int *v, int attrib, int dev) {
  switch (attrib) {
    case 75: *v = 9; break;            /* compute capability major */
    case 76: *v = 0; break;            /* minor */
    case 97: *v = 232448; break;       /* shared memory per block, opt-in */
    case 8: *v = 49152; break;         /* shared memory per block */
    case 81: *v = 233472; break;       /* shared memory per multiprocessor */
    case 12: *v = 65536; break;        /* registers per block */
    case 16: *v = 132; break;          /* multiprocessors */
    case 10: *v = 32; break;           /* warp size */
    default: *v = 1; break;
  }
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)0x10; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = (void *)0x10; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { return 0; }
CUresult cuCtxGetDevice(int *dev) { *dev = 0; return 0; }
CUresult cuCtxGetLimit(size_t *v, int limit) { *v = 0; return 0; }
CUresult cuCtxSetLimit(int limit, size_t v) { return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { *s = "stub libcuda"; return 0; }
CUresult cuModuleLoadData(void **mod, const void *image) { *mod = (void *)0x20; return 0; }
CUresult cuModuleUnload(void *mod) { return 0; }
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) { *fn = (void *)0x30; return 0; }
CUresult cuFuncGetAttribute(int *v, int attrib, void *fn) { *v = attrib == 0 ? 1024 : attrib == 4 ? 32 : 0; return 0; }
CUresult cuFuncSetAttribute(void *fn, int attrib, int v) { return 0; }
CUresult cuFuncSetCacheConfig(void *fn, int config) { return 0; }
CUresult cuOccupancyMaxActiveClusters(int *n, void *fn, const void *config) { *n = 1; return 0; }
CUresult cuPointerGetAttribute(void *data, int attrib, uint64_t ptr) { *(uint64_t *)data = ptr; return 0; }
CUresult cuPointerGetAttributes(unsigned n, int *attribs, void **data, uint64_t ptr) { return 0; }
CUresult cuStreamIsCapturing(void *stream, int *status) { *status = 0; return 0; }
CUresult cuTensorMapEncodeTiled() { return 0; }
CUresult cuTensorMapEncodeIm2col() { return 0; }
CUresult cuLaunchKernelEx(const void *config, void *fn, void **params, void **extra) { stub_launches++; return 0; }
CUresult cuLaunchKernel() { stub_launches++; return 0; }
