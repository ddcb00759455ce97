/* A workload with known user frames, for lockprof's user-stack tests.
 *
 * Build: cc -O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
 *        -fno-optimize-sibling-calls -pthread -Wl,--build-id=sha1
 *
 * Threads write to one pipe (its mutex is contended) from a chain of
 * functions whose names exist only here:
 *   raw:  lockprof_test_thread -> lockprof_test_loop -> lockprof_test_writer,
 *         which issues write(2) itself (inline syscall): the writer is the
 *         innermost user frame, read from the syscall's saved ip.
 *   libc: lockprof_test_libc_thread -> lockprof_test_libc_loop ->
 *         lockprof_test_libc_writer -> glibc's write(), which sets up no
 *         frame: a frame-pointer walk skips lockprof_test_libc_writer.
 * One reader drains the pipe. Runs for the given seconds, then exits.
 * Usage: lockprof_test raw|libc SECONDS [THREADS]
 */
#define _GNU_SOURCE
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
	__asm__ volatile("syscall" /* LOCKPROF_SYSCALL */
			 : "=a"(ret)
			 : "0"(1L), "D"((long)fds[1]), "S"(buf), "d"(sizeof(buf))
			 : "rcx", "r11", "memory");
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

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "raw") && strcmp(argv[1], "libc"))) {
		fprintf(stderr, "usage: %s raw|libc SECONDS [THREADS]\n", argv[0]);
		return 2;
	}
	int secs = atoi(argv[2]);
	int n = argc > 3 ? atoi(argv[3]) : 4;
	if (n < 1 || n > 64)
		n = 4;
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
