/*
 * shoal-init is the process of a warm job sandbox, mounted read-only at
 * /dev/shoal-init; the daemon finds it beside its own binary. The protocol
 * it speaks is internal/sandbox/stub's, which documents it.
 *
 *   shoal-init        reads one command from stdin, then execs it with the
 *                     rest of stdin as the command's (a sandbox used once).
 *   shoal-init serve  the sandbox's pid 1, reused from job to job: for each
 *                     request on its stdin (a unix seqpacket socket) it
 *                     forks a step that announces itself, reads its command
 *                     and execs it, and answers with how the step ended.
 *   shoal-init init CMD [ARG]...
 *                     an app replica's pid 1: runs CMD as its child, passes
 *                     every signal it gets on to it, reaps orphans, and
 *                     exits as CMD does.
 *   shoal-init log    on the host, a replica's log writer: copies stdin (the
 *                     replica's output, a pipe) to stdout (its log file),
 *                     each line prefixed with the time its first byte was
 *                     read, until every writer of the pipe has closed it.
 *
 * It is C, static and single-purpose so that a step starts with a fork
 * and an exec only: a step's start-up is the job's latency.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG_RUN 'r'
#define MSG_EXIT 'x'
#define MSG_FAIL 'f'
#define MAX_CMD (4u << 20)
#define STEP_FDS 4

/* A step's command, as stub.Encode writes it. */
struct cmd {
	uint64_t cpu_secs;
	char *cwd;
	char **argv;
	char **env;
	uint32_t envc;
};

static uint32_t be32(const unsigned char *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static uint64_t be64(const unsigned char *b)
{
	return (uint64_t)be32(b) << 32 | be32(b + 4);
}

/* read_full reads exactly n bytes; it returns 0, or -1 with errno set
 * (0 at an early end of input). */
static int read_full(int fd, void *buf, size_t n)
{
	char *p = buf;
	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = 0;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* fail says on stderr why the command named name cannot run, in the form
 * the daemon turns into the step's error (stub.Failed), and exits 127 as a
 * shell does for a command it cannot run. */
static void fail(const char *name, const char *why)
{
	char line[1024];
	size_t n = 0;
	const char *pre = "shoal-init: cannot run \"";
	for (; *pre && n < sizeof line; pre++)
		line[n++] = *pre;
	for (const unsigned char *s = (const unsigned char *)name; *s && n + 8 < sizeof line - 64; s++) {
		if (*s == '"' || *s == '\\') {
			line[n++] = '\\';
			line[n++] = (char)*s;
		} else if (*s < 0x20 || *s == 0x7f) {
			n += (size_t)snprintf(line + n, sizeof line - n, "\\x%02x", *s);
		} else {
			line[n++] = (char)*s;
		}
	}
	n += (size_t)snprintf(line + n, sizeof line - n, "\": %s\n", why);
	if (n > sizeof line)
		n = sizeof line;
	ssize_t w = write(2, line, n);
	(void)w;
	_exit(127);
}

static void fail_errno(const char *name, const char *what)
{
	char why[512];
	snprintf(why, sizeof why, "%s: %s", what, strerror(errno));
	fail(name, why);
}

/* read_cmd reads a command from fd 0 without reading past it. */
static void read_cmd(struct cmd *c)
{
	unsigned char hdr[4];
	if (read_full(0, hdr, sizeof hdr) < 0)
		fail("", errno ? strerror(errno) : "no command on stdin");
	uint32_t size = be32(hdr);
	if (size > MAX_CMD || size < 16)
		fail("", "malformed command (its size)");
	unsigned char *b = malloc(size);
	if (b == NULL)
		fail("", "out of memory");
	if (read_full(0, b, size) < 0)
		fail("", errno ? strerror(errno) : "the command was cut short");
	c->cpu_secs = be64(b);
	uint32_t argc = be32(b + 8);
	c->envc = be32(b + 12);
	if (argc == 0 || argc > size || c->envc > size || b[size - 1] != '\0')
		fail("", "malformed command (its counts)");
	size_t want = 1 + (size_t)argc + c->envc, got = 0;
	char **s = calloc(want + 2, sizeof *s); /* argv and env each end in NULL */
	if (s == NULL)
		fail("", "out of memory");
	for (size_t i = 16; i < size; i += strlen((char *)b + i) + 1) {
		if (got == want)
			fail("", "malformed command (more strings than counted)");
		s[got + (got > argc)] = (char *)b + i; /* a NULL after argv */
		got++;
	}
	if (got != want)
		fail("", "malformed command (fewer strings than counted)");
	c->cwd = s[0];
	c->argv = s + 1;
	c->env = s + argc + 2;
}

/* mkdirs makes dir and its missing parents. */
static int mkdirs(char *dir)
{
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		int r = mkdir(dir, 0755);
		*p = '/';
		if (r < 0 && errno != EEXIST)
			return -1;
	}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

static void exec_path(const char *name, char **argv);

/* exec_cmd runs the command read from stdin in place of this process. */
static void exec_cmd(void)
{
	struct cmd c;
	read_cmd(&c);
	const char *name = c.argv[0];
	if (c.cpu_secs > 0) {
		struct rlimit l = {.rlim_cur = c.cpu_secs, .rlim_max = c.cpu_secs + 1};
		if (setrlimit(RLIMIT_CPU, &l) < 0)
			fail_errno(name, "RLIMIT_CPU");
	}
	if (chdir(c.cwd) < 0) {
		if (errno != ENOENT || mkdirs(c.cwd) < 0 || chdir(c.cwd) < 0) {
			char what[300];
			snprintf(what, sizeof what, "workdir %.256s", c.cwd);
			fail_errno(name, what);
		}
	}
	/* The sandbox's environment (the image's, PATH and HOME) with the
	 * job's and the step's on top. */
	for (uint32_t i = 0; i < c.envc; i++) {
		if (strchr(c.env[i], '=') != NULL && putenv(c.env[i]) < 0)
			fail_errno(name, "environment");
	}
	if (strchr(name, '/') != NULL) {
		execve(name, c.argv, environ);
		fail_errno(name, "exec");
	}
	exec_path(name, c.argv);
}

/* exec_path runs name, found in $PATH, with execve: as the OCI runtime
 * runs a container's process, a file that is not a program is not handed
 * to a shell. */
static void exec_path(const char *name, char **argv)
{
	const char *path = getenv("PATH");
	if (path == NULL || *path == '\0')
		fail(name, "executable file not found: no PATH");
	int denied = 0;
	for (const char *dir = path;; ) {
		const char *end = strchrnul(dir, ':');
		size_t n = (size_t)(end - dir);
		char file[4096];
		int len;
		if (n == 0) /* an empty entry is the current directory */
			len = snprintf(file, sizeof file, "./%s", name);
		else
			len = snprintf(file, sizeof file, "%.*s/%s", (int)n, dir, name);
		if (len < 0 || (size_t)len >= sizeof file)
			errno = ENAMETOOLONG; /* not cut short: another file */
		else
			execve(file, argv, environ);
		if (errno == EACCES)
			denied = 1;
		else if (errno != ENOENT && errno != ENOTDIR && errno != ENAMETOOLONG)
			fail_errno(name, "exec");
		if (*end == '\0')
			break;
		dir = end + 1;
	}
	if (denied) {
		errno = EACCES;
		fail_errno(name, "exec");
	}
	fail(name, "executable file not found in $PATH");
}

/* reply sends Serve's answer to the daemon. */
static void reply(const void *b, size_t n)
{
	ssize_t r = send(0, b, n, MSG_NOSIGNAL);
	(void)r;
}

static void reply_fail(const char *why)
{
	char b[256];
	int n = snprintf(b, sizeof b, "%c%s", MSG_FAIL, why);
	reply(b, n < (int)sizeof b ? (size_t)n : sizeof b - 1);
}

/* reap collects every child that has ended: the orphans of earlier steps,
 * killed by the daemon with their step's cgroup. */
static void reap(void)
{
	for (;;) {
		pid_t p = waitpid(-1, NULL, WNOHANG);
		if (p > 0 || (p < 0 && errno == EINTR))
			continue;
		return;
	}
}

/* on_hangup ends Serve, and with it (the sandbox's pid 1) every process of
 * the sandbox, as soon as the daemon's end of the control socket closes:
 * a daemon that died leaves no step running. */
static void *on_hangup(void *arg)
{
	(void)arg;
	struct pollfd p = {.fd = 0, .events = POLLRDHUP};
	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
	_exit(2);
	return NULL;
}

/* step is the child Serve forks for a request: with the request's
 * descriptors as its stdin, stdout, stderr and fd 3, in a session of its
 * own and as the reaper of its orphans, it writes a byte on fd 3 (the daemon, reading it with SO_PASSCRED,
 * learns its host pid and moves it into the step's cgroup), closes fd 3,
 * and only then reads its command. */
static void step(const int *fds)
{
	int high[STEP_FDS];
	for (int i = 0; i < STEP_FDS; i++) {
		high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 16);
		if (high[i] < 0)
			_exit(126);
	}
	for (int i = 0; i < STEP_FDS; i++) {
		if (dup2(high[i], i) < 0)
			_exit(126);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	/* The step's process is its processes' reaper, as a container's
	 * process, its pid 1, is on the ordinary path: an orphan of the step
	 * becomes its child, not Serve's, which would keep it a zombie, still
	 * counted against the step's pids limit, until the step ends. The
	 * setting holds across execve. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		_exit(126);
	if (write(3, "s", 1) != 1)
		_exit(126);
	close(3);
	exec_cmd();
}

/*
 * What a step could change of Serve that the next step inherits or sees. A
 * step runs as the same user as Serve, so it may change, through prlimit,
 * setpriority, sched_setaffinity, sched_setscheduler, sched_setattr,
 * ioprio_set or /proc/1, Serve's resource limits, OOM score adjustment,
 * core dump filter and autogroup (the process's) and any thread's
 * scheduling (nice, policy, priority, the time slice it asks, utilization
 * clamps, reset-on-fork), CPU affinity and I/O priority. Serve reads all of
 * it as it starts and again before each step, on every thread, and answers
 * a request with MsgFail, starting no step, if any of it changed: the
 * daemon then drops the sandbox.
 */
#define MAX_THREADS 8

struct sched_attr_ {
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
	uint32_t util_min, util_max;
};

struct thread_state {
	struct sched_attr_ sched;
	cpu_set_t cpus;
	long ioprio;
};

struct proc_state {
	struct rlimit rl[RLIM_NLIMITS];
	char oom[32], core[32], autogroup[64];
	int nthreads;
	struct thread_state th[MAX_THREADS]; /* by thread id, ascending */
};

static void read_small(const char *path, char *buf, size_t n)
{
	memset(buf, 0, n);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return; /* a kernel built without it: "" before and after */
	ssize_t r = read(fd, buf, n - 1);
	(void)r;
	close(fd);
}

static int cmp_tid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
	return (x > y) - (x < y);
}

/* read_state reads Serve's state; it returns why it could not, or NULL. */
static const char *read_state(struct proc_state *st)
{
	memset(st, 0, sizeof *st);
	for (int r = 0; r < RLIM_NLIMITS; r++) {
		if (getrlimit(r, &st->rl[r]) < 0)
			return "cannot read its resource limits";
	}
	read_small("/proc/self/oom_score_adj", st->oom, sizeof st->oom);
	read_small("/proc/self/coredump_filter", st->core, sizeof st->core);
	read_small("/proc/self/autogroup", st->autogroup, sizeof st->autogroup);
	pid_t tids[MAX_THREADS];
	DIR *d = opendir("/proc/self/task");
	if (d == NULL)
		return "cannot list its threads";
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (st->nthreads == MAX_THREADS) {
			closedir(d);
			return "too many threads";
		}
		tids[st->nthreads++] = (pid_t)atoi(e->d_name);
	}
	closedir(d);
	qsort(tids, (size_t)st->nthreads, sizeof tids[0], cmp_tid);
	for (int i = 0; i < st->nthreads; i++) {
		struct thread_state *t = &st->th[i];
		if (syscall(SYS_sched_getattr, tids[i], &t->sched, sizeof t->sched, 0) < 0 ||
		    sched_getaffinity(tids[i], sizeof t->cpus, &t->cpus) < 0)
			return "cannot read a thread's scheduling";
		t->ioprio = syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, tids[i]);
	}
	return NULL;
}

/* changed says what differs between st, as Serve started, and now, or
 * NULL. */
static const char *changed(const struct proc_state *st)
{
	struct proc_state now;
	const char *err = read_state(&now);
	if (err != NULL)
		return err;
	if (memcmp(st->rl, now.rl, sizeof st->rl) != 0)
		return "a job changed its resource limits";
	if (strcmp(st->oom, now.oom) != 0)
		return "a job changed its OOM score adjustment";
	if (strcmp(st->core, now.core) != 0)
		return "a job changed its core dump filter";
	if (strcmp(st->autogroup, now.autogroup) != 0)
		return "a job changed its autogroup";
	if (st->nthreads != now.nthreads)
		return "its threads changed";
	for (int i = 0; i < st->nthreads; i++) {
		const struct thread_state *a = &st->th[i], *b = &now.th[i];
		if (memcmp(&a->sched, &b->sched, sizeof a->sched) != 0)
			return "a job changed a thread's scheduling";
		if (!CPU_EQUAL(&a->cpus, &b->cpus))
			return "a job changed a thread's CPU affinity";
		if (a->ioprio != b->ioprio)
			return "a job changed a thread's I/O priority";
	}
	return NULL;
}

/* serve is the loop of a reusable sandbox's pid 1 (see the top). */
static int serve(void)
{
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return 1;
	/* Every signal at its default action: the kernel then drops, as it is
	 * sent, any signal sent to a pid namespace's init from inside it, so a
	 * step can neither end Serve nor make it spend CPU time outside the
	 * step's cgroup. Not dumpable: a step running as the same user can
	 * neither trace it nor open its memory or descriptors through /proc. */
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++) {
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &dfl, NULL);
	}
	pthread_t t;
	if (pthread_create(&t, NULL, on_hangup, NULL) != 0)
		return 1;
	static struct proc_state started;
	if (read_state(&started) != NULL)
		return 1;
	for (;;) {
		reap();
		char buf[16];
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(STEP_FDS * sizeof(int))];
		} oob;
		struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = oob.b, .msg_controllen = sizeof oob.b};
		ssize_t n = recvmsg(0, &m, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		reap(); /* what the last step left, killed since with its cgroup */
		int fds[STEP_FDS], nfds = 0;
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h != NULL; h = CMSG_NXTHDR(&m, h)) {
			if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
				continue;
			int k = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			int *in = (int *)CMSG_DATA(h);
			for (int i = 0; i < k; i++) {
				if (nfds < STEP_FDS)
					fds[nfds++] = in[i];
				else
					close(in[i]);
			}
		}
		if (buf[0] != MSG_RUN || n != 1 || nfds != STEP_FDS || (m.msg_flags & MSG_CTRUNC)) {
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
			reply_fail("malformed request");
			continue;
		}
		const char *what = changed(&started);
		if (what != NULL) {
			reply_fail(what); /* before the step's sync socket closes */
			for (int i = 0; i < STEP_FDS; i++)
				close(fds[i]);
			continue;
		}
		pid_t pid = fork();
		if (pid == 0)
			step(fds);
		int forkErr = errno;
		for (int i = 0; i < STEP_FDS; i++)
			close(fds[i]);
		if (pid < 0) {
			reply_fail(strerror(forkErr));
			continue;
		}
		int ws;
		pid_t w;
		while ((w = waitpid(pid, &ws, 0)) < 0 && errno == EINTR)
			;
		if (w < 0) {
			reply_fail(strerror(errno));
			continue;
		}
		unsigned char out[5] = {MSG_EXIT, (unsigned char)((unsigned)ws >> 24), (unsigned char)((unsigned)ws >> 16),
					(unsigned char)((unsigned)ws >> 8), (unsigned char)ws};
		reply(out, sizeof out);
	}
}

/* init is an app replica's pid 1 (shoal-init init CMD [ARG]...). The
 * kernel gives a pid namespace's init only the signals it has a handler
 * for, so an app run as pid 1 without one never sees the SIGTERM of a
 * graceful stop, and orphans of the app are reparented to pid 1, whose
 * zombies count against the replica's pids limit until it reaps them.
 * init blocks every signal and takes them with sigwaitinfo: SIGCHLD reaps
 * every child that ended, any other signal is sent on to CMD. When CMD
 * ends, init exits with its code (128+signal if a signal killed it), and
 * the kernel kills whatever CMD left in the namespace. */
static int init(char **argv)
{
	sigset_t all, old;
	sigfillset(&all);
	if (sigprocmask(SIG_SETMASK, &all, &old) < 0)
		return 126;
	pid_t child = fork();
	if (child < 0) {
		fail_errno(argv[0], "fork");
	}
	if (child == 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		if (strchr(argv[0], '/') != NULL) {
			execve(argv[0], argv, environ);
			fail_errno(argv[0], "exec");
		}
		exec_path(argv[0], argv);
	}
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&all, &si);
		if (sig < 0)
			continue; /* EINTR */
		if (sig != SIGCHLD) {
			kill(child, sig);
			continue;
		}
		for (;;) {
			int ws;
			pid_t p = waitpid(-1, &ws, WNOHANG);
			if (p < 0 && errno == EINTR)
				continue;
			if (p <= 0)
				break;
			if (p != child)
				continue;
			if (WIFSIGNALED(ws))
				return 128 + WTERMSIG(ws);
			return WEXITSTATUS(ws);
		}
	}
}

/* write_all writes n bytes to fd; what cannot be written (a full disk) is
 * dropped: the replica must not stall or die because its log cannot grow. */
static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

#define LOG_IN (64u << 10)
#define LOG_OUT (256u << 10)
#define STAMP_LEN 31 /* "2006-01-02T15:04:05.000000000Z " */

/* log_copy is the log mode: one read, one clock reading and one write per
 * chunk of output, whatever its number of lines. A last line without its
 * newline gets one at the end. */
static int log_copy(void)
{
	static char in[LOG_IN], out[LOG_OUT];
	int bol = 1;
	signal(SIGHUP, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	(void)fcntl(0, F_SETPIPE_SZ, 1 << 20); /* fewer wake-ups; best effort */
	for (;;) {
		ssize_t n = read(0, in, sizeof in);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		struct timespec ts;
		struct tm tm;
		char stamp[96]; /* STAMP_LEN used, room for any int */
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ ", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)ts.tv_nsec);
		size_t o = 0, i = 0;
		while (i < (size_t)n) {
			if (bol) {
				if (o + STAMP_LEN > sizeof out) {
					write_all(1, out, o);
					o = 0;
				}
				memcpy(out + o, stamp, STAMP_LEN);
				o += STAMP_LEN;
				bol = 0;
			}
			char *nl = memchr(in + i, '\n', (size_t)n - i);
			size_t end = nl ? (size_t)(nl - in) + 1 : (size_t)n;
			if (o + (end - i) > sizeof out) {
				write_all(1, out, o);
				o = 0;
			}
			memcpy(out + o, in + i, end - i);
			o += end - i;
			i = end;
			bol = nl != NULL;
		}
		write_all(1, out, o);
	}
	if (!bol)
		write_all(1, "\n", 1);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "log") == 0)
		return log_copy();
	if (argc > 1 && strcmp(argv[1], "serve") == 0)
		return serve();
	if (argc > 2 && strcmp(argv[1], "init") == 0)
		return init(argv + 2);
	exec_cmd();
	return 127;
}
