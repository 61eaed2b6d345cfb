// Counters of the calling thread over a region, for the graph-launch loops of nccl-tests and nccl-bench
// (GLPERF names this library in both): glperf_start() and glperf_stop(tag) on the same thread around the region,
// then glperf_report() once the timing is done prints one line "GLP tag k=v ..." to stderr. Hardware counters are read scaled when the PMU multiplexes them, and left out
// ("-1") where the machine gives none; rq_us is the thread's time waiting on a run queue (schedstat), other_cpu_us
// the process's other threads' CPU time over the region. GLPERF_SAMPLE_US=P samples the thread's instruction
// pointer every P µs of its CPU time (cpu-clock, kernel included) and prints "GLS tag self" lines: the samples per
// mapped file ("[kernel]" above user space), then the hottest 256-byte blocks of the top files as file offsets.
// "GLH tag" lines give every thread's CPU time over the region (schedstat), summed by thread name. With
// GLPERF_SAMPLE_ALL=1 too, the other threads are sampled as well: "GLS tag tid:name" lines, from glperf_start to
// glperf_stop.
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct ev { uint32_t type; uint64_t config; int user_only; const char *name; };
static const struct ev evs[] = {
  {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 0, "task_us"},
  {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, 0, "cs"},
  {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, 0, "mig"},
  {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, 0, "pf"},
  {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 0, "ins"},
  {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 1, "ins_u"},
  {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0, "cyc"},
  {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 1, "cyc_u"},
  {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, 0, "llc_miss"},
  {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, 0, "br_miss"},
};
#define NEV (int)(sizeof evs / sizeof evs[0])
static __thread int fd[NEV];
static __thread double w0, thr0, proc0, rq0;
static __thread int cpu0;

static double clk(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static double rq_us(void) {
  unsigned long long run = 0, wait = 0;
  FILE *f = fopen("/proc/thread-self/schedstat", "r");
  if (!f) return -1;
  if (fscanf(f, "%llu %llu", &run, &wait) != 2) wait = 0;
  fclose(f);
  return wait / 1e3;
}

#define RING_PAGES 256
#define OTHER_PAGES 32
#define MAXS 256
static __thread int sfd = -1;
static __thread void *ring;
// GLPERF_SAMPLE_ALL=1: the process's other threads sampled too (ids, names, fds and rings).
static int nother, otid[MAXS], ofd[MAXS];
static void *oring[MAXS];
static char oname[MAXS][32];

// open_sampler samples thread tid's instruction pointer every period µs of its CPU time into a ring of pages.
static int open_sampler(int tid, int period, int pages, void **r) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a; a.type = PERF_TYPE_SOFTWARE; a.config = PERF_COUNT_SW_CPU_CLOCK; a.disabled = 1;
  a.sample_period = (uint64_t)period * 1000; a.sample_type = PERF_SAMPLE_IP; a.exclude_hv = 1;
  a.wakeup_events = 1 << 30;
  int fd = syscall(SYS_perf_event_open, &a, tid, -1, -1, 0);
  if (fd < 0) { perror("GLPERF_SAMPLE_US: perf_event_open"); return -1; }
  *r = mmap(NULL, (pages + 1) * sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (*r == MAP_FAILED) { perror("GLPERF_SAMPLE_US: mmap"); close(fd); return -1; }
  return fd;
}

static int threads_list(int *tids, char (*names)[32], int max);

static void sample_start(void) {
  const char *e = getenv("GLPERF_SAMPLE_US");
  sfd = -1; nother = 0;
  if (!e || atoi(e) <= 0) return;
  sfd = open_sampler(0, atoi(e), RING_PAGES, &ring);
  if (getenv("GLPERF_SAMPLE_ALL")) {
    int tids[MAXS], self = (int)syscall(SYS_gettid);
    char names[MAXS][32];
    int n = threads_list(tids, names, MAXS);
    for (int i = 0; i < n; i++) {
      if (tids[i] == self) continue;
      int fd = open_sampler(tids[i], atoi(e), OTHER_PAGES, &oring[nother]);
      if (fd < 0) continue;
      ofd[nother] = fd; otid[nother] = tids[i]; memcpy(oname[nother], names[i], 32); nother++;
    }
  }
  for (int i = 0; i < nother; i++) ioctl(ofd[i], PERF_EVENT_IOC_ENABLE, 0);
}

static void sample_disable(void) {
  if (sfd >= 0) ioctl(sfd, PERF_EVENT_IOC_DISABLE, 0);
  for (int i = 0; i < nother; i++) ioctl(ofd[i], PERF_EVENT_IOC_DISABLE, 0);
}

struct map { uint64_t lo, hi, off; char path[160]; };
struct cnt { int map; uint64_t blk; long n; };
static int bycount(const void *a, const void *b) { long x = ((const struct cnt *)a)->n, y = ((const struct cnt *)b)->n; return (y > x) - (y < x); }

// kernel_symbol names the kernel function holding addr (/proc/kallsyms, readable by root).
static void kernel_symbol(uint64_t addr, char *out, size_t n) {
  FILE *f = fopen("/proc/kallsyms", "r");
  char line[256], best[128] = "?"; uint64_t bestAt = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long a; char type, name[128];
    if (sscanf(line, "%lx %c %127s", &a, &type, name) != 3 || a == 0 || a > addr + 255 || a < bestAt) continue;
    bestAt = a; snprintf(best, sizeof best, "%s", name);
  }
  if (f) fclose(f);
  snprintf(out, n, "%s", best);
}

static struct map maps[4096];
static int nmaps;
static void load_maps(void) {
  nmaps = 0;
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  while (f && nmaps < 4096 && fgets(line, sizeof line, f)) {
    struct map *m = &maps[nmaps];
    char perm[8]; int pos = 0;
    if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %n", &m->lo, &m->hi, perm, &m->off, &pos) < 4 || perm[2] != 'x') continue;
    char *p = line + pos, *nl = strchr(p, '\n'); if (nl) *nl = 0;
    char *base = strrchr(p, '/');
    snprintf(m->path, sizeof m->path, "%s", *p ? (base ? base + 1 : p) : "[anon]");
    nmaps++;
  }
  if (f) fclose(f);
}

// ring_report prints a ring's samples per mapped file, then its top hottest 256-byte blocks (file offsets; kernel
// blocks named for the first ksyms of them): lines "GLS tag label ...".
static void ring_report(void *r, int pages, long tag, const char *label, int top, int ksyms) {
  struct perf_event_mmap_page *h = r;
  long pg = sysconf(_SC_PAGESIZE);
  uint64_t head = h->data_head, size = (uint64_t)pages * pg;
  __sync_synchronize();
  char *data = (char *)r + pg;
  static struct cnt files[4097], blks[65536];
  int nb = 0; long total = 0, lost = 0;
  memset(files, 0, sizeof files);
  for (int i = 0; i <= 4096; i++) files[i].map = i;
  for (uint64_t t = head > size ? head - size : 0; t < head;) {
    struct perf_event_header eh;
    for (size_t b = 0; b < sizeof eh; b++) ((char *)&eh)[b] = data[(t + b) % size];
    if (eh.size == 0) break;
    if (eh.type == PERF_RECORD_SAMPLE) {
      uint64_t ip; for (int b = 0; b < 8; b++) ((char *)&ip)[b] = data[(t + sizeof eh + b) % size];
      int mi = 4096; uint64_t blk = ip >> 8;
      for (int k = 0; k < nmaps; k++) if (ip >= maps[k].lo && ip < maps[k].hi) { mi = k; blk = (ip - maps[k].lo + maps[k].off) >> 8; break; }
      files[mi].n++; total++;
      int j = 0; while (j < nb && !(blks[j].map == mi && blks[j].blk == blk)) j++;
      if (j == nb && nb < 65536) { blks[nb].map = mi; blks[nb].blk = blk; blks[nb].n = 0; nb++; }
      if (j < nb) blks[j].n++;
    } else if (eh.type == PERF_RECORD_LOST) lost++;
    t += eh.size;
  }
  if (total == 0) return;
  /* merge files by name: a library maps several executable ranges rarely, but [anon] often */
  static struct cnt named[4097]; int nn = 0;
  for (int i = 0; i <= 4096; i++) {
    if (!files[i].n) continue;
    const char *nmx = i == 4096 ? "[kernel]" : maps[i].path;
    int j = 0; while (j < nn && strcmp(named[j].map == 4096 ? "[kernel]" : maps[named[j].map].path, nmx)) j++;
    if (j == nn) { named[nn] = files[i]; nn++; } else named[j].n += files[i].n;
  }
  qsort(named, nn, sizeof named[0], bycount);
  fprintf(stderr, "GLS %ld %s samples=%ld lost=%ld", tag, label, total, lost);
  for (int i = 0; i < nn; i++) fprintf(stderr, " %s=%ld", named[i].map == 4096 ? "[kernel]" : maps[named[i].map].path, named[i].n);
  fprintf(stderr, "\n");
  qsort(blks, nb, sizeof blks[0], bycount);
  for (int i = 0, k = 0; i < nb && i < top; i++) {
    char sym[128] = "";
    if (blks[i].map == 4096 && k++ < ksyms) kernel_symbol(blks[i].blk << 8, sym, sizeof sym);
    fprintf(stderr, "GLS %ld %s blk %s+0x%lx %ld %s\n", tag, label, blks[i].map == 4096 ? "[kernel]" : maps[blks[i].map].path,
            (unsigned long)blks[i].blk << 8, blks[i].n, sym);
  }
}

static void sample_stop(long tag) {
  if (sfd < 0 && nother == 0) return;
  load_maps();
  long pg = sysconf(_SC_PAGESIZE);
  if (sfd >= 0) { ring_report(ring, RING_PAGES, tag, "self", 25, 25); munmap(ring, (RING_PAGES + 1) * pg); close(sfd); sfd = -1; }
  for (int i = 0; i < nother; i++) {
    char label[64]; snprintf(label, sizeof label, "%d:%s", otid[i], oname[i]);
    ring_report(oring[i], OTHER_PAGES, tag, label, 8, 3);
    munmap(oring[i], (OTHER_PAGES + 1) * pg); close(ofd[i]);
  }
  nother = 0;
}

// The process's threads: id, name and CPU time (schedstat, ns).
#define MAXT 512
struct thr { int tid; char name[32]; unsigned long long run; };
static struct thr before[MAXT];
static int nbefore;
static int threads(struct thr *t) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  while (d && n < MAXT && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[300]; FILE *f;
    t[n].tid = atoi(e->d_name); t[n].run = 0; t[n].name[0] = 0;
    snprintf(p, sizeof p, "/proc/self/task/%s/schedstat", e->d_name);
    if ((f = fopen(p, "r"))) { if (fscanf(f, "%llu", &t[n].run) != 1) t[n].run = 0; fclose(f); }
    snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
    if ((f = fopen(p, "r"))) { if (!fgets(t[n].name, sizeof t[n].name, f)) t[n].name[0] = 0; fclose(f); }
    char *nl = strchr(t[n].name, '\n'); if (nl) *nl = 0;
    for (char *c = t[n].name; *c; c++) if (*c == ' ') *c = '_';
    n++;
  }
  if (d) closedir(d);
  return n;
}

static int threads_list(int *tids, char (*names)[32], int max) {
  static struct thr t[MAXT];
  int n = threads(t);
  if (n > max) n = max;
  for (int i = 0; i < n; i++) { tids[i] = t[i].tid; memcpy(names[i], t[i].name, 32); }
  return n;
}

static void threads_report(long tag) {
  static struct thr after[MAXT];
  int na = threads(after), self = (int)syscall(SYS_gettid);
  char names[MAXT][40]; double us[MAXT]; int cnt[MAXT], nn = 0;
  for (int i = 0; i < na; i++) {
    unsigned long long b = 0;
    for (int j = 0; j < nbefore; j++) if (before[j].tid == after[i].tid) b = before[j].run;
    char nm[40]; snprintf(nm, sizeof nm, "%s%s", after[i].tid == self ? "*" : "", after[i].name);
    int k = 0; while (k < nn && strcmp(names[k], nm)) k++;
    if (k == nn) { snprintf(names[nn], sizeof names[nn], "%s", nm); us[nn] = 0; cnt[nn] = 0; nn++; }
    us[k] += (after[i].run - b) / 1e3; cnt[k]++;
  }
  fprintf(stderr, "GLH %ld threads=%d", tag, na);
  for (int k = 0; k < nn; k++) fprintf(stderr, " %s(%d)=%.0f", names[k], cnt[k], us[k]);
  fprintf(stderr, "\n");
}

void glperf_start(void) {
  nbefore = threads(before);
  sample_start();
  for (int i = 0; i < NEV; i++) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a; a.type = evs[i].type; a.config = evs[i].config; a.disabled = 1;
    a.exclude_kernel = evs[i].user_only; a.exclude_hv = 1;
    a.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    fd[i] = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
  }
  cpu0 = sched_getcpu(); rq0 = rq_us();
  thr0 = clk(CLOCK_THREAD_CPUTIME_ID); proc0 = clk(CLOCK_PROCESS_CPUTIME_ID); w0 = clk(CLOCK_MONOTONIC);
  for (int i = 0; i < NEV; i++) if (fd[i] >= 0) ioctl(fd[i], PERF_EVENT_IOC_ENABLE, 0);
  if (sfd >= 0) ioctl(sfd, PERF_EVENT_IOC_ENABLE, 0);
}

// glperf_stop ends the region: quick, so that the time it takes stays out of the region's timing.
static __thread double vals[NEV], rw, rthr, rproc, rrq;
static __thread int cpu1;
static __thread long rtag;
void glperf_stop(long tag) {
  sample_disable();
  for (int i = 0; i < NEV; i++) if (fd[i] >= 0) ioctl(fd[i], PERF_EVENT_IOC_DISABLE, 0);
  rw = clk(CLOCK_MONOTONIC) - w0; rthr = clk(CLOCK_THREAD_CPUTIME_ID) - thr0; rproc = clk(CLOCK_PROCESS_CPUTIME_ID) - proc0;
  rrq = rq_us() - rq0; cpu1 = sched_getcpu(); rtag = tag;
  for (int i = 0; i < NEV; i++) {
    uint64_t r[3];
    vals[i] = -1;
    if (fd[i] >= 0 && read(fd[i], r, sizeof r) == sizeof r && r[2] > 0) vals[i] = (double)r[0] * r[1] / r[2];
    if (i == 0 && vals[i] >= 0) vals[i] /= 1e3;
  }
}

// glperf_report prints the region's lines and frees its counters: called once the timing is done. Its thread
// times ("GLH") run from glperf_start to this call.
void glperf_report(void) {
  long tag = rtag;
  sample_stop(tag);
  threads_report(tag);
  char line[1024];
  int n = snprintf(line, sizeof line, "GLP %ld wall_us=%.1f thr_cpu_us=%.1f other_cpu_us=%.1f rq_us=%.1f cpu=%d>%d",
                   tag, rw, rthr, rproc - rthr, rrq, cpu0, cpu1);
  for (int i = 0; i < NEV; i++) {
    n += snprintf(line + n, sizeof line - n, " %s=%.0f", evs[i].name, vals[i]);
    if (fd[i] >= 0) close(fd[i]);
  }
  fprintf(stderr, "%s\n", line);
}
