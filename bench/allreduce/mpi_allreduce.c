/* MPI_Allreduce of float32 buffers; rank 0 prints RESULT lines like
 * allreduce_bench. Compiled by run.sh with mpicc. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int iters_for(size_t bytes) {
  if (bytes <= (64 << 10)) return 2000;
  if (bytes <= (1 << 20)) return 400;
  if (bytes <= (16 << 20)) return 60;
  return 12;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t sizes[16] = {4 << 10, 256 << 10, 4 << 20, 64 << 20};
  int n = 4;
  if (argc > 1) {
    n = 0;
    for (char* s = strtok(argv[1], ","); s != NULL && n < 16; s = strtok(NULL, ",")) sizes[n++] = strtoull(s, NULL, 10);
  }
  for (int k = 0; k < n; ++k) {
    size_t bytes = sizes[k], count = bytes / sizeof(float);
    float* data = malloc(bytes);
    for (size_t i = 0; i < count; ++i) data[i] = 1.0f;
    for (int i = 0; i < 3; ++i) MPI_Allreduce(MPI_IN_PLACE, data, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    int iters = iters_for(bytes);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, data, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double seconds = (MPI_Wtime() - start) / iters;
    double busbw = 2.0 * (size - 1) / size * bytes / seconds / 1e9;
    if (rank == 0) {
      printf("RESULT openmpi %zu %d %.2f %.3f\n", bytes, iters, seconds * 1e6, busbw);
      fflush(stdout);
    }
    free(data);
  }
  MPI_Finalize();
  return 0;
}
