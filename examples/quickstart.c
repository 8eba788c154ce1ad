/*
 * quickstart.c - the KVStore chapter, step by step, on a `local` store:
 * init a key, push and pull, push several values for one key (the chapter's
 * "devices"), set an updater, pull into several outs, then lists of keys.
 * Every pulled array is printed as the chapter prints it.
 *
 * Build against an installed kvs:
 *   cc quickstart.c $(pkg-config --cflags --libs kvs) -o quickstart
 */
#include <stdio.h>
#include <stdlib.h>

#include <kvs.h>

#define ROWS 2
#define COLS 3
#define NDEV 4                         /* the chapter's four "devices" */

typedef float matrix[ROWS * COLS];

static kvs_array_t view(float *m)
{
    return (kvs_array_t){ .data = m, .dtype = KVS_FLOAT32, .ndim = 2,
                          .shape = { ROWS, COLS } };
}

static void fill(float *m, float v)
{
    for (int i = 0; i < ROWS * COLS; i++)
        m[i] = v;
}

/* Prints a 2-D array the way numpy does: [[2. 2. 2.]\n [2. 2. 2.]] */
static void print(const float *m)
{
    for (int r = 0; r < ROWS; r++) {
        printf(r == 0 ? "[[" : " [");
        for (int c = 0; c < COLS; c++)
            printf("%g.%s", m[r * COLS + c], c + 1 < COLS ? " " : "");
        printf(r + 1 < ROWS ? "]\n" : "]]\n");
    }
}

static void check(kvs_t *kv, int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "quickstart: %s: %s (%s)\n", what, kvs_strerror(rc),
                kvs_last_error(kv));
        exit(1);
    }
}

/* The chapter's updater: stored += input * 2. */
static int update(kvs_key_t key, const kvs_array_t *input, kvs_array_t *stored, void *ctx)
{
    const float *in = input->data;
    float *st = stored->data;

    (void)ctx;
    printf("update on key: %lld\n", (long long)key.id);
    for (int i = 0; i < ROWS * COLS; i++)
        st[i] += in[i] * 2;
    return 0;
}

int main(void)
{
    kvs_t *kv;
    matrix a, two, eight, ones[NDEV], outs[NDEV];
    kvs_key_t k3 = KVS_INT_KEY(3), k3s[NDEV];
    kvs_array_t va, vones[NDEV], vouts[NDEV];

    check(NULL, kvs_create("local", &kv), "create");
    for (int d = 0; d < NDEV; d++) {
        k3s[d] = k3;
        fill(ones[d], 1);
        vones[d] = view(ones[d]);
        vouts[d] = view(outs[d]);
    }
    va = view(a);

    puts("# init key 3 with 2s and pull it");
    fill(two, 2);
    check(kv, kvs_init(kv, 1, &k3, (kvs_array_t[]){ view(two) }), "init");
    check(kv, kvs_pull(kv, 1, &k3, &va, 0), "pull");
    print(a);

    puts("# push 8s, pull");
    fill(eight, 8);
    check(kv, kvs_push(kv, 1, &k3, (kvs_array_t[]){ view(eight) }, 0), "push");
    check(kv, kvs_pull(kv, 1, &k3, &va, 0), "pull");
    print(a);

    puts("# push ones from four devices: they are summed");
    check(kv, kvs_push(kv, NDEV, k3s, vones, 0), "push");
    check(kv, kvs_pull(kv, 1, &k3, &va, 0), "pull");
    print(a);

    puts("# set an updater: stored += input * 2");
    check(kv, kvs_set_updater(kv, update, NULL), "set_updater");
    check(kv, kvs_pull(kv, 1, &k3, &va, 0), "pull");
    print(a);
    check(kv, kvs_push(kv, 1, &k3, &vones[0], 0), "push");
    check(kv, kvs_pull(kv, 1, &k3, &va, 0), "pull");
    print(a);

    puts("# pull into four devices");
    check(kv, kvs_pull(kv, NDEV, k3s, vouts, 0), "pull");
    print(outs[1]);

    puts("# a list of keys: 5, 7, 9");
    {
        kvs_key_t keys[3] = { KVS_INT_KEY(5), KVS_INT_KEY(7), KVS_INT_KEY(9) };
        kvs_key_t dkeys[3 * NDEV];
        kvs_array_t dvals[3 * NDEV];
        matrix b[3];
        kvs_array_t vb[3] = { view(b[0]), view(b[1]), view(b[2]) };

        check(kv, kvs_init(kv, 3, keys, vones), "init");
        check(kv, kvs_push(kv, 3, keys, vones, 0), "push");
        check(kv, kvs_pull(kv, 3, keys, vb, 0), "pull");
        print(b[1]);

        puts("# the list from four devices each");
        for (int i = 0; i < 3; i++) {
            for (int d = 0; d < NDEV; d++) {
                dkeys[i * NDEV + d] = keys[i];
                dvals[i * NDEV + d] = vones[d];
            }
        }
        check(kv, kvs_push(kv, 3 * NDEV, dkeys, dvals, 0), "push");
        check(kv, kvs_pull(kv, 3, keys, vb, 0), "pull");
        print(b[1]);
    }
    kvs_close(kv);
    return 0;
}
