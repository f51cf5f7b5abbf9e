/* A C program built against the installed hdsm with pkg-config. */
#include <hdsm/hdsm.h>
#include <stdio.h>
#include <string.h>

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
  if (strcmp(hdsm_version(), HDSM_VERSION_STRING) != 0)
    return printf("the library is %s, its headers %s\n", hdsm_version(), HDSM_VERSION_STRING), 1;
  printf("consumer_c: hdsm %s, %zu devices ok\n", hdsm_version(), count);
  return 0;
}
