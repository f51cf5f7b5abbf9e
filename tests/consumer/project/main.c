/* A C program built against the installed hdsm with pkg-config. */
#include <hdsm/hdsm.h>
#include <stdio.h>
#include <string.h>

/* A kernel from C: b[i] += a[i], its host body and its OpenCL C text. */
static void add(const hdsm_thread* t, void* const* args) {
  const float* a = *(const float* const*)args[0];
  float* b = *(float* const*)args[1];
  const unsigned long n = *(const unsigned long*)args[2];
  const unsigned long i = (unsigned long)t->block.x * t->block_dim.x + t->idx.x;
  if (i < n) b[i] += a[i];
}
static const char* add_source =
    "__kernel void add(__global const float* a, __global float* b, ulong n) {"
    "  size_t i = get_global_id(0); if (i < n) b[i] += a[i]; }";

int main(void) {
  size_t count = 0;
  if (hdsm_config_set("HDSM_SIM_DEVICES", "3") != HDSM_SUCCESS || hdsm_device_count(&count) != HDSM_SUCCESS) {
    printf("error: %s\n", hdsm_last_error());
    return 1;
  }
  if (count != 3) return printf("expected 3 devices, got %zu\n", count), 1;
  if (hdsm_config_set("HDSM_SIM_MEMORY", "oops") == HDSM_SUCCESS) return printf("bad value accepted\n"), 1;
  void* shared = NULL;
  void* device = NULL;
  if (hdsm_safe_alloc(64, -1, &shared) != HDSM_SUCCESS || hdsm_safe(shared, &device) != HDSM_SUCCESS ||
      device == NULL || hdsm_free(shared) != HDSM_SUCCESS)
    return printf("safe: %s\n", hdsm_last_error()), 1;
  char from[32] = "an asynchronous copy", to[32] = "";
  hdsm_event copied = NULL;
  if (hdsm_memcpy_async(to, from, sizeof from, &copied) != HDSM_SUCCESS ||
      hdsm_event_wait(copied) != HDSM_SUCCESS || hdsm_event_destroy(copied) != HDSM_SUCCESS || to[0] != 'a')
    return printf("memcpy_async: %s\n", hdsm_last_error()), 1;
  hdsm_kernel k = NULL;
  float *a = NULL, *b = NULL;
  unsigned long n = 1000;
  if (hdsm_kernel_create("add", add, add_source, &k) != HDSM_SUCCESS ||
      hdsm_alloc(n * sizeof(float), -1, (void**)&a) != HDSM_SUCCESS ||
      hdsm_alloc(n * sizeof(float), -1, (void**)&b) != HDSM_SUCCESS)
    return printf("kernel: %s\n", hdsm_last_error()), 1;
  for (unsigned long i = 0; i < n; ++i) a[i] = (float)i, b[i] = 1.0f;
  const hdsm_arg args[] = {HDSM_IN(a), HDSM_INOUT(b), HDSM_VALUE(n)};
  const hdsm_dim3 grid = {4, 1, 1}, block = {256, 1, 1};
  if (hdsm_call(k, grid, block, 0, args, 3) != HDSM_SUCCESS || hdsm_sync() != HDSM_SUCCESS)
    return printf("call: %s\n", hdsm_last_error()), 1;
  if (b[999] != 1000.0f) return printf("call: b[999] = %f, not 1000\n", b[999]), 1;
  if (hdsm_free(a) != HDSM_SUCCESS || hdsm_free(b) != HDSM_SUCCESS || hdsm_kernel_destroy(k) != HDSM_SUCCESS)
    return printf("free: %s\n", hdsm_last_error()), 1;
  if (strcmp(hdsm_version(), HDSM_VERSION_STRING) != 0)
    return printf("the library is %s, its headers %s\n", hdsm_version(), HDSM_VERSION_STRING), 1;
  printf("consumer_c: hdsm %s, %zu devices ok\n", hdsm_version(), count);
  return 0;
}
