/* An ordinary C program: it takes shared memory from hdsm's C API and from then on uses only libc
 * on it (fread, fwrite, memcpy, memmove, memset), as a program written for host memory would. Run
 * as `LD_PRELOAD=libhdsm_preload.so transform [bytes]`, none of those calls faults: hdsm does each
 * one on the device copy or through the staging pool. The program checks its own results and
 * prints the faults hdsm counted during the transfers; exit status 0 only when all data is right. */
#define _GNU_SOURCE
#include <hdsm/hdsm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void* shared(size_t bytes) {
  void* p = NULL;
  if (hdsm_alloc(bytes, -1, &p) != HDSM_SUCCESS) {
    fprintf(stderr, "hdsm_alloc(%zu): %s\n", bytes, hdsm_last_error());
    exit(2);
  }
  return p;
}

static FILE* memory_file(const char* name) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  FILE* f = fd < 0 ? NULL : fdopen(fd, "w+");
  if (f == NULL) {
    perror("memfd_create/fdopen");
    exit(2);
  }
  return f;
}

static unsigned char expected(size_t i, size_t n) {
  /* first half: the input file; second half: the memset value moved in with memmove */
  return i < n / 2 ? (unsigned char)(i * 7 + i / 4096) : 0x5a;
}

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 0) : (size_t)4 << 20;
  unsigned char* input = shared(n);
  unsigned char* filled = shared(n);
  unsigned char* result = shared(n);
  unsigned char* host = malloc(n);
  unsigned char* back = malloc(n);
  if (host == NULL || back == NULL || n < 2) return 2;
  for (size_t i = 0; i < n; ++i) host[i] = (unsigned char)(i * 7 + i / 4096);

  FILE* in = memory_file("transform input");
  FILE* out = memory_file("transform output");
  if (fwrite(host, 1, n, in) != n || fflush(in) != 0) return 2;
  rewind(in);

  hdsm_stats_reset();
  size_t bad = 0;
  if (fread(input, 1, n, in) != n) ++bad;                        /* file -> shared */
  memset(filled, 0x5a, n);                                       /* a fresh object, filled */
  memcpy(result, input, n / 2);                                  /* shared -> shared */
  memmove(result + n / 2, filled, n - n / 2);                    /* shared -> shared */
  if (fwrite(result, 1, n, out) != n || fflush(out) != 0) ++bad; /* shared -> file */
  memcpy(back, result, n);                                       /* shared -> host */
  hdsm_stats stats;
  if (hdsm_stats_get(&stats) != HDSM_SUCCESS) return 2;
  printf("faults during transfers: %llu\n", (unsigned long long)(stats.read_faults + stats.write_faults));

  for (size_t i = 0; i < n; ++i) bad += back[i] != expected(i, n);
  rewind(out);
  if (fread(host, 1, n, out) != n) ++bad;
  for (size_t i = 0; i < n; ++i) bad += host[i] != expected(i, n);
  for (size_t i = 0; i < n; i += 4093) bad += result[i] != expected(i, n); /* the CPU's own view */
  if (bad != 0) {
    printf("%zu wrong bytes\n", bad);
    return 1;
  }
  printf("all data correct\n");
  fclose(in);
  fclose(out);
  free(host);
  free(back);
  hdsm_free(input);
  hdsm_free(filled);
  hdsm_free(result);
  return 0;
}
