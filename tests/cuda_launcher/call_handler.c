/* Calls a CUDA launcher's FFI handler as XLA would, with three input and two
   output buffers of N points and a fake XLA API (its stream 0xabc), twice;
   prints the handler's error, if any. Usage: call_handler LAUNCHER.so N */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "xla/ffi/api/c_api.h"

struct XLA_FFI_Error { char message[700]; };
static struct XLA_FFI_Error last_error;

static XLA_FFI_Error* create_error(XLA_FFI_Error_Create_Args* args) {
  snprintf(last_error.message, sizeof last_error.message, "%s", args->message);
  return &last_error;
}
static XLA_FFI_Error* get_stream(XLA_FFI_Stream_Get_Args* args) {
  args->stream = (void*)0xabc;
  return NULL;
}

int main(int argc, char** argv) {
  void* launcher = dlopen(argv[1], RTLD_NOW);
  if (!launcher) { printf("dlopen failed: %s\n", dlerror()); return 2; }
  XLA_FFI_Error* (*handler)(XLA_FFI_CallFrame*) = (XLA_FFI_Error* (*)(XLA_FFI_CallFrame*))dlsym(launcher, "rs_ffi_cuda");
  int64_t n = atoll(argv[2]);
  XLA_FFI_Api api;
  memset(&api, 0, sizeof api);
  api.XLA_FFI_Error_Create = create_error;
  api.XLA_FFI_Stream_Get = get_stream;
  XLA_FFI_Buffer buffers[5];
  void* pointers[5];
  for (int i = 0; i < 5; ++i) {
    memset(&buffers[i], 0, sizeof buffers[i]);
    buffers[i].data = (void*)(uintptr_t)(0x100 * (i + 1));
    buffers[i].rank = 1;
    buffers[i].dims = &n;
    pointers[i] = &buffers[i];
  }
  XLA_FFI_CallFrame frame;
  memset(&frame, 0, sizeof frame);
  frame.api = &api;
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args.size = 3;
  frame.args.args = pointers;
  frame.rets.size = 2;
  frame.rets.rets = pointers + 3;
  for (int call = 0; call < 2; ++call) {
    XLA_FFI_Error* error = handler(&frame);
    printf(error ? "error %s\n" : "ok\n", error ? error->message : "");
  }
  return 0;
}
