/* A stand-in for the CUDA driver (libcuda.so.1) for tests without a GPU: the
   entry points the engine's CUDA launcher calls, each printing what it was
   asked, so that a test reads how the launcher drove the driver.
   FAKE_NO_CONTEXT: no context current (the launcher must use the buffers');
   FAKE_LAUNCH_FAILS=N: cuLaunchKernel returns error N. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static int loaded_modules;

CUresult cuCtxGetCurrent(void** context) {
  *context = getenv("FAKE_NO_CONTEXT") ? NULL : (void*)0x1000;
  return 0;
}
CUresult cuPointerGetAttribute(void* data, int attribute, unsigned long long pointer) {
  printf("pointer_attribute %d %llx\n", attribute, pointer);
  *(void**)data = (void*)0x2000;
  return 0;
}
CUresult cuCtxPushCurrent_v2(void* context) { printf("push %p\n", context); return 0; }
CUresult cuCtxPopCurrent_v2(void** context) { *context = (void*)0x2000; printf("pop\n"); return 0; }
CUresult cuModuleLoadData(void** module, const void* image) {
  if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200; /* CUDA_ERROR_INVALID_IMAGE */
  printf("module_loaded %d\n", ++loaded_modules);
  *module = (void*)0x3000;
  return 0;
}
CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  printf("function %s\n", name);
  *function = (void*)0x4000;
  return 0;
}
CUresult cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* stream, void** params, void** extra) {
  const char* fails = getenv("FAKE_LAUNCH_FAILS");
  if (fails) return atoi(fails);
  printf("launch grid %u %u %u block %u %u %u shared %u stream %p extra %p n %d pointers", gx, gy, gz, bx, by, bz,
         shared, stream, (void*)extra, *(int*)params[0]);
  for (int i = 1; i <= 5; ++i) printf(" %p", *(void**)params[i]);
  printf("\n");
  (void)function;
  return 0;
}
CUresult cuGetErrorName(CUresult error, const char** name) {
  *name = error == 700 ? "CUDA_ERROR_ILLEGAL_ADDRESS" : "CUDA_ERROR_UNKNOWN";
  return 0;
}
