// dlopen_check LIBHDSM: loads libhdsm with dlopen, as a plug-in or Python's ctypes would, and calls
// its C API's hdsm_version(). Exit 0 when both work; 1 with the loader's message otherwise.
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBHDSM\n", argv[0]);
    return 2;
  }
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "dlopen of %s failed: %s\n", argv[1], dlerror());
    return 1;
  }
  const char* (*version)(void) = (const char* (*)(void))dlsym(library, "hdsm_version");
  if (version == NULL) {
    fprintf(stderr, "%s has no hdsm_version: %s\n", argv[1], dlerror());
    return 1;
  }
  printf("loaded %s, version %s\n", argv[1], version());
  return 0;
}
