/*
 * plan.h - a data call's plan (plan.c): its key list grouped by key, each
 * group's entry resolved (a fresh one for a key the call adds) and its
 * inputs laid out group by group. init.c, push.c and pull.c run their
 * calls over plans.
 */
#ifndef KVS_PLAN_H
#define KVS_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"

struct entry;
struct kvs__engine;
struct kvs__optim_state;
struct kvs__source;

struct group {
    struct entry *ent;                 /* the key's entry; a new one when fresh */
    bool fresh;                        /* ent is not in the table yet */
    int k;                             /* values of this key in the list */
    const void **in;                   /* their data, in list order */
    int *dev;                          /* their devices; NULL: all on the host */
    const struct kvs__source *src;     /* their sources (array.h), or NULL */
    const struct kvs__sink *sink;      /* where the sum goes as well (array.h), or NULL */
    struct kvs__optim_state *ostate;   /* new state, handed to ent at commit */
    bool ranged;                       /* in[] and the update are elements [first,
                                        * first + count) of the key only */
    size_t first, count;
    uint64_t step;                     /* the optimizer's update number; 0: the next */
};

struct plan {
    int n, ngroups;
    struct group *groups;              /* ngroups; the head of one allocation */
    const void **inputs;               /* n, grouped: groups[g].in points in here */
    int *devs;                         /* n, grouped: groups[g].dev points in here */
    int *gid;                          /* n: group of each list index */
};

/* Groups the list and resolves each group's entry. A key not in the table
 * gets a fresh entry shaped like its first array when allow_new, else is
 * KVS_ENOKEY. Every array is then matched against its entry, and table
 * room is reserved for the fresh ones. On failure *p holds nothing.
 * Errors: KVS_ENOKEY, a mismatch's, -ENOMEM. */
int kvs__plan_make(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                   const kvs_array_t *arrs, bool allow_new, struct plan *p,
                   struct kvs__err *e);

/* Frees the plan's fresh entries (those not put in the table), its
 * states not handed over, and its arrays; leaves *p zeroed. */
void kvs__plan_free(struct kvs__engine *eng, struct plan *p);

#endif
