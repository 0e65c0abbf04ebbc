// Defaults for the sanitizer runtimes in `--config=asan` builds, linked into every binary by
// .bazelrc (--custom_malloc), so a binary a test starts itself (merak_train under mpirun) runs
// with them too. ASAN_OPTIONS, UBSAN_OPTIONS and LSAN_OPTIONS in the environment still override.
//
// Leaks: memory that libraries outside the project allocate once and keep until exit (Open MPI,
// its plugins (mca_*.so) and helpers do not free everything in MPI_Finalize; the CUDA runtime
// keeps its state). A frame in any of these modules suppresses the report.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libmpi.so\n"
         "leak:libopen-pal.so\n"
         "leak:libopen-rte.so\n"
         "leak:/openmpi/lib/openmpi3/mca_\n"
         "leak:libhwloc.so\n"
         "leak:libpmix.so\n"
         "leak:libevent\n"
         "leak:libcudart\n"
         // Strings Open MPI formats with asprintf: the fast unwinder stops inside libc, before
         // the caller's frame. The project itself never calls asprintf.
         "leak:__vasprintf_internal\n";
}

// Open MPI unloads its plugins in MPI_Finalize, so the leak check at exit could not name the
// module a leaked block came from, nor suppress it. Unloading nothing keeps them named.
extern "C" int dlclose(void*) { return 0; }

// Leaks are errors; the process exits non-zero on the first report.
// intercept_tls_get_addr=0: the runtime of GCC 12 (and up to 13) takes a dynamic TLS block of
// glibc >= 2.25 for glibc 2.19's layout when its address happens to sit 16 bytes into a page,
// reads a bogus range from the two words before it, and the leak check's tracer then faults on
// it at exit ("Tracer caught signal 11"; seen on 7 of 8 ranks of a 2 x 2 x 2 checkpointing run,
// the range printed with LSAN_OPTIONS=verbosity=1:log_threads=1). Dynamic TLS belongs to
// dlopen'ed modules only (Open MPI's plugins, whose leaks are suppressed above); our code is
// linked into each binary, and its thread-locals are static TLS, which the check still scans.
extern "C" const char* __asan_default_options() {
  return "detect_leaks=1:intercept_tls_get_addr=0";
}

// Undefined behaviour ends the process (the build also passes -fno-sanitize-recover), with a
// stack trace to read.
extern "C" const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}

// ThreadSanitizer (`--config=tsan`): a report ends the process with a failing status.
extern "C" const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1";
}

// Races inside libraries built without TSan, whose own synchronisation it cannot see (Open MPI's
// progress and event threads, hwloc, PMIx). A called_from_lib name must match exactly one loaded
// library (else TSan stops); Open MPI's plugins (mca_*.so, several loaded) are matched as any
// frame's module instead.
extern "C" const char* __tsan_default_suppressions() {
  return "race:/openmpi3/mca_\n"
         "mutex:/openmpi3/mca_\n"
         "called_from_lib:mca_pmix_ext3x.so\n"
         "called_from_lib:libmpi.so\n"
         "called_from_lib:libopen-pal.so\n"
         "called_from_lib:libopen-rte.so\n"
         "called_from_lib:libpmix.so\n"
         "called_from_lib:libevent_core\n"
         "called_from_lib:libevent_pthreads\n"
         "called_from_lib:libhwloc.so\n";
}
