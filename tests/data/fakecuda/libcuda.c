/* A stand-in for the CUDA driver library where no GPU exists: cuDeviceGetCount answers
   CUDA_ERROR_NOT_INITIALIZED (3) until cuInit ran, as the real driver API does (cuda.h). */
static int initialised = 0;
int cuInit(unsigned int flags) { (void)flags; initialised = 1; return 0; }
int cuDeviceGetCount(int *count) { if (!initialised) return 3; *count = 1; return 0; }
