/* An MPI program built against the installed hdsm (hdsm::mpi or pkg-config hdsm-mpi): a shared
 * object whose data the device holds goes to this rank itself by MPI_Isend/MPI_Irecv and arrives,
 * without a page fault, so libhdsm_mpi's calls were the ones that ran (libmpi would have read the
 * object through its user view). */
#include <hdsm/hdsm.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  enum { kBytes = 1 << 20 };
  unsigned char* out = NULL;
  unsigned char* in = NULL;
  static unsigned char pattern[kBytes];
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = (unsigned char)(i * 131 + (i >> 10));
  if (hdsm_alloc(kBytes, -1, (void**)&out) != HDSM_SUCCESS ||
      hdsm_alloc(kBytes, -1, (void**)&in) != HDSM_SUCCESS ||
      hdsm_memcpy(out, pattern, kBytes) != HDSM_SUCCESS)
    return printf("alloc: %s\n", hdsm_last_error()), 1;
  hdsm_stats before, after;
  if (hdsm_stats_get(&before) != HDSM_SUCCESS) return printf("stats: %s\n", hdsm_last_error()), 1;
  MPI_Request r[2];
  MPI_Irecv(in, kBytes, MPI_BYTE, 0, 7, MPI_COMM_SELF, &r[0]);
  MPI_Isend(out, kBytes, MPI_BYTE, 0, 7, MPI_COMM_SELF, &r[1]);
  if (MPI_Waitall(2, r, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return printf("MPI_Waitall failed\n"), 1;
  if (hdsm_stats_get(&after) != HDSM_SUCCESS) return printf("stats: %s\n", hdsm_last_error()), 1;
  if (after.read_faults + after.write_faults != before.read_faults + before.write_faults)
    return printf("the transfer faulted: libmpi's MPI_Isend ran, not libhdsm_mpi's\n"), 1;
  if (memcmp(in, pattern, kBytes) != 0) return printf("the message did not arrive whole\n"), 1;
  hdsm_free(out);
  hdsm_free(in);
  printf("consumer_mpi: hdsm %s ok\n", hdsm_version());
  MPI_Finalize();
  return 0;
}
