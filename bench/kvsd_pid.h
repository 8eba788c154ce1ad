/*
 * kvsd_pid.h - the job's kvsd, found from a worker that kvsrun started, so
 * that a benchmark can read kvsd's CPU time and memory in /proc. Included
 * once per program, after <dirent.h>, <stdio.h>, <stdlib.h>, <string.h>
 * and <unistd.h>.
 */
#ifndef KVS_BENCH_KVSD_PID_H
#define KVS_BENCH_KVSD_PID_H

/* kvsrun starts kvsd and the workers as its children: kvsd is our
 * sibling. -1 when there is none (a kvsd started by hand). */
static inline pid_t find_kvsd(void)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t parent = getppid(), found = -1;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL && found < 0) {
        char path[300], buf[512], *p;
        FILE *f;
        int ppid;

        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        p = fgets(buf, sizeof buf, f);
        fclose(f);
        /* "pid (comm) state ppid ..." */
        if (!p || !strstr(buf, " (kvsd) ") || !(p = strrchr(buf, ')')))
            continue;
        if (sscanf(p + 1, " %*c %d", &ppid) == 1 && ppid == parent)
            found = (pid_t)atol(e->d_name);
    }
    closedir(d);
    return found;
}

#endif
