/* A workload with known user frames, for lockprof's user-stack tests.
 *
 * Build: cc -O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
 *        -fno-optimize-sibling-calls -pthread -Wl,--build-id=sha1
 *
 * Threads write to one pipe (its mutex is contended) from a chain of
 * functions whose names exist only here:
 *   raw:  lockprof_test_thread -> lockprof_test_loop -> lockprof_test_writer,
 *         which issues write(2) itself (inline syscall on x86_64 and
 *         arm64): the writer is the
 *         innermost user frame, read from the syscall's saved ip.
 *   libc: lockprof_test_libc_thread -> lockprof_test_libc_loop ->
 *         lockprof_test_libc_writer -> glibc's write(), which sets up no
 *         frame: a frame-pointer walk skips lockprof_test_libc_writer.
 * One reader drains the pipe. Runs for the given seconds, then exits.
 *
 * futex: threads take one glibc mutex, lockprof_test_mutex, with
 *         lockprof_test_futex_thread -> lockprof_test_futex_loop ->
 *         lockprof_test_futex_take: pthread_mutex_trylock first and, when
 *         that fails, one contended acquisition counted, then
 *         pthread_mutex_lock through lockprof_test_futex_lock (glibc's
 *         lock functions set up no frame: a frame-pointer walk from the
 *         futex wait skips that wrapper and shows lockprof_test_futex_take).
 *         Driven by its standard input: prints "ready PID futex ADDR"
 *         (ADDR: the mutex's address), starts the threads at a "go" line,
 *         stops them at the next line, at end of input or after SECONDS,
 *         prints "futex acquisitions N contended M" once they all ended,
 *         then exits at end of input (its maps stay readable meanwhile).
 * Usage: lockprof_test raw|libc|futex SECONDS [THREADS]
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fds[2];
static volatile int stop;
static char buf[64];
static volatile long written;

/* Called after the write, so that the writer is not a leaf function and
 * keeps its frame (gcc omits a leaf's frame even with
 * -mno-omit-leaf-frame-pointer when it needs no stack). */
__attribute__((noinline)) void lockprof_test_count(long n)
{
	written += n;
}

__attribute__((noinline)) long lockprof_test_writer(void)
{
	long ret;
	/* write(fds[1], buf, 64) */
#if defined(__x86_64__)
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"(1L), "D"((long)fds[1]), "S"(buf), "d"(sizeof(buf))
			 : "rcx", "r11", "memory");
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = 64; /* __NR_write */
	register long x0 __asm__("x0") = fds[1];
	register long x1 __asm__("x1") = (long)buf;
	register long x2 __asm__("x2") = sizeof(buf);
	__asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	ret = x0;
#else
#error "lockprof_test: no inline write(2) for this architecture"
#endif
	lockprof_test_count(ret);
	return ret;
}

__attribute__((noinline)) void lockprof_test_loop(void)
{
	while (!stop)
		lockprof_test_writer();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void *lockprof_test_thread(void *arg)
{
	(void)arg;
	lockprof_test_loop();
	__asm__ volatile("" ::: "memory");
	return NULL;
}

__attribute__((noinline)) long lockprof_test_libc_writer(void)
{
	long r = write(fds[1], buf, sizeof(buf));
	__asm__ volatile("" ::: "memory");
	return r;
}

__attribute__((noinline)) void lockprof_test_libc_loop(void)
{
	while (!stop)
		lockprof_test_libc_writer();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void *lockprof_test_libc_thread(void *arg)
{
	(void)arg;
	lockprof_test_libc_loop();
	__asm__ volatile("" ::: "memory");
	return NULL;
}

static void *reader(void *arg)
{
	char sink[4096];
	(void)arg;
	while (!stop)
		if (read(fds[0], sink, sizeof(sink)) <= 0)
			break;
	return NULL;
}

pthread_mutex_t lockprof_test_mutex = PTHREAD_MUTEX_INITIALIZER;
static volatile long futex_shared;

struct futex_counts {
	long acquisitions;
	long contended;
};

__attribute__((noinline)) void lockprof_test_futex_lock(void)
{
	pthread_mutex_lock(&lockprof_test_mutex);
	__asm__ volatile("" ::: "memory");
}

/* One acquisition and its tiny critical section. */
__attribute__((noinline)) void lockprof_test_futex_take(struct futex_counts *c)
{
	if (pthread_mutex_trylock(&lockprof_test_mutex)) {
		c->contended++;
		lockprof_test_futex_lock();
	}
	c->acquisitions++;
	for (int i = 0; i < 64; i++)
		futex_shared++;
	pthread_mutex_unlock(&lockprof_test_mutex);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void lockprof_test_futex_loop(struct futex_counts *c)
{
	while (!stop)
		lockprof_test_futex_take(c);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void *lockprof_test_futex_thread(void *arg)
{
	lockprof_test_futex_loop(arg);
	__asm__ volatile("" ::: "memory");
	return NULL;
}

/* Reads standard input up to the end of its next line; 0 at end of input. */
static int next_line(void)
{
	char c;
	ssize_t r;
	while ((r = read(0, &c, 1)) == 1)
		if (c == '\n')
			return 1;
	return 0;
}

static int futex_main(int secs, int n)
{
	static struct futex_counts counts[64];
	pthread_t t[64];
	printf("ready %d futex %#lx\n", getpid(), (unsigned long)&lockprof_test_mutex);
	fflush(stdout);
	if (!next_line())
		return 1;
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, lockprof_test_futex_thread, &counts[i]))
			return 1;
	struct pollfd in = { .fd = 0, .events = POLLIN };
	poll(&in, 1, secs * 1000);
	stop = 1;
	long acquisitions = 0, contended = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		acquisitions += counts[i].acquisitions;
		contended += counts[i].contended;
	}
	printf("futex acquisitions %ld contended %ld\n", acquisitions, contended);
	fflush(stdout);
	while (next_line())
		;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "raw") && strcmp(argv[1], "libc") && strcmp(argv[1], "futex"))) {
		fprintf(stderr, "usage: %s raw|libc|futex SECONDS [THREADS]\n", argv[0]);
		return 2;
	}
	int secs = atoi(argv[2]);
	int n = argc > 3 ? atoi(argv[3]) : 4;
	if (n < 1 || n > 64)
		n = 4;
	if (!strcmp(argv[1], "futex"))
		return futex_main(secs, n);
	if (pipe(fds))
		return 1;
	void *(*fn)(void *) = strcmp(argv[1], "raw") ? lockprof_test_libc_thread : lockprof_test_thread;
	pthread_t t[65];
	pthread_create(&t[0], NULL, reader, NULL);
	for (int i = 1; i <= n; i++)
		pthread_create(&t[i], NULL, fn, NULL);
	printf("ready %d\n", getpid());
	fflush(stdout);
	struct timespec ts = { secs, 0 };
	nanosleep(&ts, NULL);
	stop = 1;
	/* Unblock whoever sleeps on the pipe, then leave. */
	close(fds[1]);
	_exit(0);
}
