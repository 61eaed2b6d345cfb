#!/usr/bin/env bash
# On the GPU box: nccl-tests with each graph launch's end timed (GL_TIMES=1 prints "GLT inplace k us" per launch
# and "GLE inplace us" at the end, to stderr) and GL_WARM=1 (each graph launched once, streams synchronised and a
# barrier, before the timed region) and GLPERF=libglperf.so (glperf_start and glperf_stop around the timed
# launches, on the launching thread, and glperf_report once timed: glperf.c), built into /tmp/nccl-tests-gl; prints the binaries' folder.
set -eu
export NCCL_NVLS_ENABLE=0
d=/tmp/nccl-tests-gl
[ -d $d ] || cp -a .gpu/nccl-tests $d
python3 - $d/src/common.cu <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
if "GL_TIMES" not in s:
    old = """    Barrier(args);
    tim.reset();
    for (int l=0; l<cudaGraphLaunches; l++) {
      for (int i=0; i<args->nGpus; i++) {
        CUDACHECK(cudaGraphLaunch(graphExec[i], args->streams[i]));
      }
    }
  }
#endif
"""
    new = """    Barrier(args);
    if (getenv("GL_WARM")) {
      for (int i=0; i<args->nGpus; i++) CUDACHECK(cudaGraphLaunch(graphExec[i], args->streams[i]));
      for (int i=0; i<args->nGpus; i++) CUDACHECK(cudaStreamSynchronize(args->streams[i]));
      Barrier(args);
    }
    glTimes = getenv("GL_TIMES") != NULL; glN = 0;
    tim.reset();
    for (int l=0; l<cudaGraphLaunches; l++) {
      for (int i=0; i<args->nGpus; i++) {
        CUDACHECK(cudaGraphLaunch(graphExec[i], args->streams[i]));
        if (glTimes && glN < 4096) glT[glN++] = tim.elapsed();
      }
    }
  }
#endif
"""
    assert old in s; s = s.replace(old, new)
    old = """  double deltaSec = (blocking_coll == 3 ? collOnlySec : tim.elapsed())/(iters*agg_iters);
"""
    new = """  double deltaSec = (blocking_coll == 3 ? collOnlySec : tim.elapsed())/(iters*agg_iters);
  if (glTimes && cudaGraphLaunches >= 1) {
    double glEnd = tim.elapsed();
    for (int k=0; k<glN; k++) fprintf(stderr, "GLT %s %d %.3f\\n", in_place ? "true" : "false", k, glT[k]*1e6);
    fprintf(stderr, "GLE %s %.3f\\n", in_place ? "true" : "false", glEnd*1e6);
    glTimes = 0;
  }
"""
    assert old in s; s = s.replace(old, new)
    old = "testResult_t BenchTime("
    s = s.replace(old, "static int glTimes, glN; static double glT[4096];\n" + old, 1)
if "GLPERF" not in s:
    old = """    glTimes = getenv("GL_TIMES") != NULL; glN = 0;
    tim.reset();
"""
    new = """    glTimes = getenv("GL_TIMES") != NULL; glN = 0;
    glpLoad();
    if (glpStartF) glpStartF();
    tim.reset();
"""
    assert old in s; s = s.replace(old, new)
    old = """  double cputimeSec = blocking_coll == 3 ? collOnlySec : tim.elapsed();
"""
    new = old + """  if (cudaGraphLaunches >= 1 && glpStopF) glpStopF(in_place);
"""
    assert old in s; s = s.replace(old, new)
    old = """  if (glTimes && cudaGraphLaunches >= 1) {
"""
    assert old in s; s = s.replace(old, """  if (cudaGraphLaunches >= 1 && glpReportF) glpReportF();
""" + old)
    old = "static int glTimes, glN;"
    s = s.replace(old, """#include <dlfcn.h>
static void (*glpStartF)(void); static void (*glpStopF)(long); static void (*glpReportF)(void);
static void glpLoad(void) {
  static int done; if (done) return; done = 1;
  const char *p = getenv("GLPERF"); if (!p) return;
  void *h = dlopen(p, RTLD_NOW); if (!h) { fprintf(stderr, "GLPERF: %s\\n", dlerror()); return; }
  glpStartF = (void (*)(void))dlsym(h, "glperf_start"); glpStopF = (void (*)(long))dlsym(h, "glperf_stop");
  glpReportF = (void (*)(void))dlsym(h, "glperf_report");
}
""" + old, 1)
open(p, "w").write(s)
PY
make -s -C $d -j"$(nproc)" NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >/tmp/nccl-tests-gl-build.log 2>&1 \
  || { tail -20 /tmp/nccl-tests-gl-build.log; exit 1; }
echo $d/build
