/*
 * test_shard.c - the rule of which host owns which key or part
 * (src/proto/shard.c), which kvsd keeps its keys by and kvsctl plan models:
 * owners of given keys, part counts about the split bound, each host's
 * range of a split key, and that every part and every element has exactly
 * one owner. The expected values were worked out apart from the code (the
 * key hash and kvs__wire_part's rounding by hand), so that a change of
 * the rule shows here before it shows as hosts that disagree.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "proto/shard.h"
#include "proto/wire.h"

#define MIB ((uint64_t)1 << 20)

static void test_owners(void **state)
{
    static const int at4[8] = { 3, 1, 2, 1, 2, 2, 0, 3 }, at3[8] = { 1, 2, 1, 0, 1, 2, 2, 0 };
    struct kvs__shard one = KVS__SHARD(1), three = KVS__SHARD(3), four = KVS__SHARD(4),
                      five = KVS__SHARD(5), many = KVS__SHARD(64);

    (void)state;
    for (int k = 0; k < 8; k++) {
        assert_int_equal(kvs__shard_owner(&four, KVS_INT_KEY(k)), at4[k]);
        assert_int_equal(kvs__shard_owner(&three, KVS_INT_KEY(k)), at3[k]);
        assert_int_equal(kvs__shard_owner(&one, KVS_INT_KEY(k)), 0);
    }
    assert_int_equal(kvs__shard_owner(&three, KVS_STR_KEY("w")), 0);
    assert_int_equal(kvs__shard_owner(&five, KVS_STR_KEY("fc.weight")), 2);
    /* bench_suite's ResNet-50 keys start at 1000 */
    assert_int_equal(kvs__shard_owner(&many, KVS_INT_KEY(1000)), 8);
    assert_int_equal(kvs__shard_owner(&many, KVS_INT_KEY(1001)), 20);
    assert_int_equal(kvs__shard_owner(&many, KVS_INT_KEY(1160)), 0);
}

/* kvsd's bounds from the hosts alone: 4 MiB at 1 and 2 hosts, 8 MiB / H
 * above (rounded down to the byte), never below 64 KiB; parts of 1 MiB. */
static void test_bounds(void **state)
{
    static const struct { int h; uint64_t split; } want[] = {
        { 1, 4 * MIB }, { 2, 4 * MIB }, { 3, 2796202 }, { 4, 2 * MIB }, { 8, MIB },
        { 64, 128 << 10 }, { 127, 66052 }, { 128, 64 << 10 }, { 129, 64 << 10 },
        { 512, 64 << 10 }, { KVS__HOSTS_MAX, 64 << 10 },
    };

    (void)state;
    assert_int_equal(KVS__SPLIT_BYTES, 4 * MIB);
    assert_int_equal(KVS__SPLIT_FLOOR, 64 << 10);
    assert_int_equal(KVS__PART_BYTES, MIB);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct kvs__shard s = KVS__SHARD(want[i].h);

        assert_int_equal(kvs__shard_split_bytes(want[i].h), want[i].split);
        assert_int_equal(s.nhosts, want[i].h);
        assert_int_equal(s.split_bytes, want[i].split);
        assert_int_equal(s.part_bytes, MIB);
    }
}

/* Part counts about kvsd's bounds at 1, 2, 3, 8 and 64 hosts. */
static void test_parts_by_hosts(void **state)
{
    struct kvs__shard one = KVS__SHARD(1), two = KVS__SHARD(2), three = KVS__SHARD(3),
                      eight = KVS__SHARD(8), many = KVS__SHARD(64);

    (void)state;
    assert_int_equal(kvs__shard_parts(&one, 1024 * MIB), 1);
    /* 2 hosts: from 4 MiB on (a key of 4 MiB in 2 parts a host),
     * ceil(bytes / 2 MiB) a host */
    assert_int_equal(kvs__shard_parts(&two, 4 * MIB - 1), 1);
    assert_int_equal(kvs__shard_parts(&two, 4 * MIB), 4);
    assert_int_equal(kvs__shard_parts(&two, 4 * MIB + 1), 6);
    assert_int_equal(kvs__shard_parts(&two, 64 * MIB), 64);
    /* 3 hosts: from 2,796,202 bytes on; a 4 MiB key in 2 parts a host */
    assert_int_equal(kvs__shard_parts(&three, 2796201), 1);
    assert_int_equal(kvs__shard_parts(&three, 2796202), 3);
    assert_int_equal(kvs__shard_parts(&three, 3 * MIB), 3);
    assert_int_equal(kvs__shard_parts(&three, 4 * MIB), 6);
    assert_int_equal(kvs__shard_parts(&three, 9 * MIB), 9);
    /* 8 hosts: from 1 MiB on */
    assert_int_equal(kvs__shard_parts(&eight, MIB - 1), 1);
    assert_int_equal(kvs__shard_parts(&eight, MIB), 8);
    assert_int_equal(kvs__shard_parts(&eight, 8 * MIB), 8);
    assert_int_equal(kvs__shard_parts(&eight, 8 * MIB + 1), 16);
    /* 64 hosts: from 128 KiB on; ResNet-50's 4 MiB convs in one part a host */
    assert_int_equal(kvs__shard_parts(&many, (128 << 10) - 1), 1);
    assert_int_equal(kvs__shard_parts(&many, 128 << 10), 64);
    assert_int_equal(kvs__shard_parts(&many, 4 * MIB), 64);
    assert_int_equal(kvs__shard_parts(&many, 64 * MIB), 64);
    assert_int_equal(kvs__shard_parts(&many, 64 * MIB + 1), 128);
    /* the wire's cap: at most KVS__PARTS_MAX, still a multiple of the hosts */
    assert_int_equal(kvs__shard_parts(&three, 65536 * MIB), 3 * (KVS__PARTS_MAX / 3));
    assert_int_equal(kvs__shard_parts(&eight, 65536 * MIB), KVS__PARTS_MAX);
    assert_int_equal(kvs__shard_parts(&many, 65536 * MIB), KVS__PARTS_MAX);
}

/* The arithmetic of parts with given bounds (as kvsctl plan --split and
 * --part ask). */
static void test_parts(void **state)
{
    struct kvs__shard three = { 3, 4 * MIB, MIB }, four = { 4, 4 * MIB, MIB },
                      what_if = { 4, 256 << 10, 64 << 10 };

    (void)state;
    /* just below the bound: whole; from it on: ceil(bytes / (4 x 1 MiB))
     * parts a host */
    assert_int_equal(kvs__shard_parts(&four, 4 * MIB - 1), 1);
    assert_int_equal(kvs__shard_parts(&four, 4 * MIB), 4);
    assert_int_equal(kvs__shard_parts(&four, 4 * MIB + 1), 8);
    assert_int_equal(kvs__shard_parts(&four, 8 * MIB), 8);
    assert_int_equal(kvs__shard_parts(&four, 8 * MIB + 1), 12);
    assert_int_equal(kvs__shard_parts(&four, 10 * MIB), 12);
    assert_int_equal(kvs__shard_parts(&three, 4 * MIB + 4), 6);
    assert_int_equal(kvs__shard_parts(&three, 9 * MIB), 9);
    assert_int_equal(kvs__shard_parts(&four, 65536 * MIB), KVS__PARTS_MAX);
    assert_int_equal(kvs__shard_parts(&what_if, (256 << 10) - 1), 1);
    assert_int_equal(kvs__shard_parts(&what_if, 256 << 10), 4);
    assert_int_equal(kvs__shard_parts(&what_if, 1 * MIB), 16);

    assert_int_equal(kvs__shard_per_host(&four, 12), 3);
    assert_int_equal(kvs__shard_per_host(&four, 1), 1);
}

static void test_part_owners(void **state)
{
    static const int want[8] = { 3, 3, 0, 0, 1, 1, 2, 2 };
    struct kvs__shard four = KVS__SHARD(4);

    (void)state;
    for (int p = 0; p < 8; p++)
        assert_int_equal(kvs__shard_part_owner(&four, 3, 8, p), want[p]);
    assert_int_equal(kvs__shard_part_owner(&four, 2, 1, 0), 2);
}

/* Key 7 of 10 MiB of float32 at 4 hosts: its owner is host 3; 12 parts
 * of 218,464 elements (2,621,440 / 12 rounded up to 16), 3 a host from
 * host 3 on, the last host's shorter. */
static void test_host_range(void **state)
{
    static const uint64_t first[4] = { 655392, 1310784, 1966176, 0 },
                          n[4] = { 655392, 655392, 655264, 655392 };
    struct kvs__shard four = KVS__SHARD(4);
    uint64_t f = 99, c = 99;

    (void)state;
    assert_int_equal(kvs__shard_owner(&four, KVS_INT_KEY(7)), 3);
    for (int h = 0; h < 4; h++) {
        assert_int_equal(kvs__shard_host_range(&four, KVS_INT_KEY(7), 2621440, 4, 1, h, &f, &c), 1);
        assert_int_equal(f, first[h]);
        assert_int_equal(c, n[h]);
    }
    /* a key not split (just below 2 MiB, the bound of 4 hosts): no range,
     * nothing written */
    f = c = 99;
    assert_int_equal(kvs__shard_host_range(&four, KVS_INT_KEY(7), MIB / 2 - 1, 4, 1, 0, &f, &c), 0);
    assert_int_equal(f, 99);
    assert_int_equal(c, 99);
}

/* Every part of a key has one owner, who owns exactly the elements
 * host_range says: the hosts' ranges cover the key once, part by part;
 * a key of rows is cut between rows only, so each row has one owner. */
static void test_one_owner_each(void **state)
{
    static const uint64_t counts[] = { 1, 16384, 16385, 32768 + 1, 1048576, 1048577, 2359296,
                                       2621440, 2048000, 4194304 + 3, 25000000 };
    static const size_t sizes[] = { 4, 8, 2 };
    static const uint64_t rows[] = { 1, 3, 32, 100, 1000 };
    static const int hosts[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 64, 128 };

    (void)state;
    for (size_t hi = 0; hi < sizeof hosts / sizeof hosts[0]; hi++) {
        int nh = hosts[hi];
        struct kvs__shard s = KVS__SHARD(nh);

        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
            for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
                kvs_key_t key = KVS_INT_KEY((int64_t)(i * 31 + j));
                uint64_t count = counts[i], covered = 0, row = rows[r];

                if (count % row != 0)
                    continue;
                int np = kvs__shard_parts(&s, count * sizes[j]);
                int owner = kvs__shard_owner(&s, key), nowned[128] = { 0 };

                assert_true(np == 1 || np % nh == 0);
                for (int p = 0; p < np; p++) {
                    int o = kvs__shard_part_owner(&s, owner, np, p);
                    uint64_t pf, pn, hf, hn;

                    assert_in_range(o, 0, nh - 1);
                    nowned[o]++;
                    kvs__wire_part(count, sizes[j], row, (uint32_t)np, (uint32_t)p, &pf, &pn);
                    covered += pn;
                    assert_int_equal(pf % row, 0);
                    assert_int_equal(pn % row, 0);
                    if (np == 1) {
                        assert_int_equal(o, owner);
                        continue;
                    }
                    /* the part lies in its owner's range and no other host's */
                    for (int h = 0; h < nh; h++) {
                        assert_int_equal(kvs__shard_host_range(&s, key, count, sizes[j], row, h,
                                                                &hf, &hn), 1);
                        if (pn > 0)
                            assert_int_equal(h == o, pf >= hf && pf + pn <= hf + hn);
                    }
                }
                assert_int_equal(covered, count);
                for (int h = 0; h < nh; h++)
                    assert_int_equal(nowned[h], np == 1 ? (h == owner) : np / nh);
            }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owners),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_parts_by_hosts),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_part_owners),
        cmocka_unit_test(test_host_range),
        cmocka_unit_test(test_one_owner_each),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
