#!/usr/bin/python3
"""The speed claims of the docs, judged and rendered from bench/RESULTS.md.

    claims.py judge VALUES
        Judges every goal of scripts/bench (goal_defs below: the one list
        of goals and their limits) by one rule and prints the goals table
        of RESULTS.md. VALUES holds lines "ID V1 V2 ...": the goal's value
        in each pass (each pass's kvs median over the same pass's peer
        median, for the ratios), in pass order. The goal's value is the
        median of those per-pass values (of the two middle ones, their
        mean), and it is met when that value is at most the limit, compared
        unrounded. The table lists the per-pass values as VALUES gives
        them, so the judgement can be re-derived from RESULTS.md alone.
    claims.py render [--check] [--results FILE] [--root DIR]
        Rewrites each marked region of README.md and doc/*.md,
        "<!-- bench:NAME -->" ... "<!-- /bench:NAME -->" (on lines of their
        own, or both on one line), with what NAME renders from the results
        file (default bench/RESULTS.md). With --check it writes nothing and
        exits 1 when a region differs from its rendering, when a region is
        unknown or not closed, or when a line outside every region and
        every code block quotes a benchmark figure (a time in µs, a GB/s
        rate, a ratio to a peer, a goal said to be met or missed).

Reads RESULTS.md files of two formats: the current one (a goals table whose
first column is a goal id in backticks, with per-pass values), and the one
before it (goal lines in code blocks, ratios of the medians to 2 digits).
From the older format nothing is judged by the per-pass rule: each such
value is marked as coming from an older run, and called met or missed only
when no value its digits allow could be judged the other way.
"""
import argparse
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ['README.md', 'doc/speed.md', 'doc/status.md', 'doc/python.md', 'doc/timeline.md',
        'doc/scaling.md', 'doc/zero-copy.md', 'doc/hosts.md', 'doc/dist.md', 'doc/gpu.md',
        'doc/api.md', 'doc/install.md', 'doc/hacking.md', 'doc/recovery.md']
SIZES = [('4K', 4096, '4 KiB'), ('256K', 262144, '256 KiB'), ('4M', 4194304, '4 MiB'),
         ('64M', 67108864, '64 MiB')]
# Open MPI's per-pass medians of one case that differ by more than this
# factor within a run (its 4 KiB round is bimodal here: bench/NOTES.md §28)
# make the docs set kvs against the one-copy floor measured in the same
# passes beside the ratio to Open MPI.
PEER_SPREAD = 2.0
LABEL = {tag: label for tag, _, label in SIZES}
LABEL['resnet50'] = 'ResNet-50'


class Bad(Exception):
    pass


# ---- judging ----------------------------------------------------------------

def median(values):
    return statistics.median(values)


def fmt(value, limit=None, digits=3):
    """value with at least `digits` decimals, more while it prints equal to
    a limit it is not equal to (0.7004 against 0.7 is "0.7004", never "0.700")."""
    text = '%.*f' % (digits, value)
    while limit is not None and value != limit and digits < 9 and \
            float(text) == float('%.*f' % (digits, limit)):
        digits += 1
        text = '%.*f' % (digits, value)
    return text


class Goal:
    """One goal: its id, its words, its limit (value <= limit is met), the
    unit of its value, and the values it was judged on."""

    def __init__(self, gid, what, limit, unit, values, legacy_text=None):
        self.id, self.what, self.limit, self.unit = gid, what, limit, unit
        self.values = values
        self.legacy = legacy_text is not None
        if not values:
            self.value, self.verdict, self.text = None, 'not measured', '-'
        elif not self.legacy:
            self.value = median(values)
            self.verdict = 'met' if self.value <= limit else 'missed'
            self.text = fmt(self.value, limit)
        else:
            # A value printed to d decimals lies within half a unit of its
            # last digit; called met or missed only when all of that range is.
            self.value = values[0]
            d = len(legacy_text.split('.')[1]) if '.' in legacy_text else 0
            half = 0.5 * 10 ** -d
            if self.value + half <= limit:
                self.verdict = 'met'
            elif self.value - half > limit:
                self.verdict = 'missed'
            else:
                self.verdict = 'undecided'
            self.text = legacy_text

    def show(self):
        """The value and its unit, as the docs print it."""
        if self.value is None:
            return 'not measured'
        if self.unit == 's' and self.value < 0.1 and not self.legacy:
            return '%.1f ms' % (self.value * 1e3)       # judged unrounded all the same
        u = {'x': '', 's': ' s', 'us': ' µs', '%': '% of the wait',
             '%t': '% of the table'}[self.unit]
        return self.text + u

    def verdict_md(self):
        if self.verdict in ('met', 'missed'):
            return '**%s**' % self.verdict
        if self.verdict == 'undecided':
            return '**at the limit** (2 digits: not decided)'
        return self.verdict


def read_values(path):
    """{id: the per-pass values as written} from lines "ID V1 V2 ..."."""
    defs, vals = goal_defs(), {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if parts[0] not in defs:
                raise Bad('%s:%d: unknown goal %r' % (path, n, parts[0]))
            for v in parts[1:]:
                try:
                    float(v)
                except ValueError:
                    raise Bad('%s:%d: %r is not a number' % (path, n, v))
            vals.setdefault(parts[0], []).extend(parts[1:])
    return vals


def limit_md(g):
    return '≤ ' + {'x': '%g', 's': '%g s', 'us': '%g µs', '%': '%g%%',
                   '%t': '%g%% of the table'}[g.unit] % g.limit


def judge(path):
    """The goals table of RESULTS.md: every goal, measured or not."""
    vals = read_values(path)
    print('| id | goal | limit | per-pass values | median | verdict |')
    print('|---|---|---|---|---|---|')
    met = judged = 0
    for gid, (what, lim, unit) in goal_defs().items():
        raw = vals.get(gid, [])
        g = Goal(gid, what, lim, unit, [float(v) for v in raw])
        print('| `%s` | %s | %s | %s | %s | %s |' % (gid, what, limit_md(g), ' '.join(raw) or '-',
                                                     g.text, g.verdict))
        met += g.verdict == 'met'
        judged += g.verdict in ('met', 'missed')
    print()
    print('%d of the %d goals measured are met.' % (met, judged))


# ---- reading RESULTS.md -------------------------------------------------------

def cells(line):
    return [c.strip() for c in line.strip().strip('|').split('|')]


def tables(lines):
    """Each markdown table: (index of its header line, header cells, rows)."""
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith('|') and i + 1 < len(lines) and \
                re.match(r'^\|(\s*:?-+:?\s*\|)+\s*$', lines[i + 1]):
            head, rows, j = cells(lines[i]), [], i + 2
            while j < len(lines) and lines[j].startswith('|'):
                rows.append(dict(zip(head, cells(lines[j]))))
                j += 1
            out.append((i, head, rows))
            i = j
        else:
            i += 1
    return out


def num(text):
    m = re.match(r'^-?[0-9]+(\.[0-9]+)?', text.strip())
    return float(m.group(0)) if m else None


LEGACY = [  # goal line of the older format -> (id, unit)
    (r'^64 MiB round, 2 workers: kvs', 'one.copy.2.64M'),
    (r'^64 MiB round, 2 workers, zero-copy', 'one.zc.2.64M'),
    (r'^4 KiB round, 2 workers', 'one.copy.2.4K'),
    (r'^256 KiB round, 2 workers', 'one.copy.2.256K'),
    (r'^4 MiB round, 2 workers', 'one.copy.2.4M'),
    (r'^4 workers, 4 KiB', 'one.copy.4.4K'),
    (r'^4 workers, 256 KiB', 'one.copy.4.256K'),
    (r'^4 workers, 4 MiB', 'one.copy.4.4M'),
    (r'^4 workers, 64 MiB', 'one.copy.4.64M'),
    (r'^ResNet-50 step \(161 keys\), 2 workers', 'one.copy.2.resnet50'),
    (r'^  the same, zero-copy', 'one.zc.2.resnet50'),
    (r'^timeline on \(KVS_TIMELINE\), 4 KiB', 'tl.4K'),
    (r'^timeline on, 64 MiB', 'tl.64M'),
    (r'^across hosts, 64 MiB: kvs', 'hosts.mpi.64M'),
    (r'^across hosts, ResNet-50 step: kvs', 'hosts.mpi.resnet50'),
    (r'^across hosts, 4 KiB: kvs', 'hosts.mpi.4K'),
    (r'^across hosts, 4 KiB: io_uring', 'hosts.sock.4K'),
    (r'^across hosts, 256 KiB: io_uring', 'hosts.sock.256K'),
    (r'^across hosts, 4 MiB: io_uring', 'hosts.sock.4M'),
    (r'^across hosts, 64 MiB: io_uring', 'hosts.sock.64M'),
    (r'^across hosts, ResNet-50: io_uring', 'hosts.sock.resnet50'),
    (r'^across hosts, 64 MiB: UCX', 'hosts.ucx.64M'),
]


# The one-host goals against Open MPI, by copy and zero-copy: (impl, workers)
# -> the limit at each size. 4 workers oversubscribe the 2 cores, where
# Open MPI's polling ranks lose most: 0.7 everywhere. By copy with 2
# workers, a 4 KiB round after a barrier pays the wake-up of a sleeping
# peer and kvsd that Open MPI's spinning ranks do not: 1.2, as after
# compute. The ResNet-50 step's 161 tensors in one list: by copy, each
# copied in and out, 0.8; zero-copy half Open MPI's time.
ONE_HOST_LIMITS = {
    ('copy', 2): {'4K': 1.2, '256K': 0.7, '4M': 0.7, '64M': 0.5, 'resnet50': 0.8},
    ('zc', 2): {'4K': 1.0, '256K': 0.7, '4M': 0.7, '64M': 0.33, 'resnet50': 0.5},
    ('copy', 4): {'4K': 0.7, '256K': 0.7, '4M': 0.7, '64M': 0.7},
    ('zc', 4): {'4K': 0.7, '256K': 0.7, '4M': 0.7, '64M': 0.7},
}


def goal_defs():
    """Every goal scripts/bench judges: id -> (words, limit, unit)."""
    d = {}
    for impl, how in (('copy', ''), ('zc', ', zero-copy')):
        for n in (2, 4):
            lims = ONE_HOST_LIMITS[(impl, n)]
            for tag, _, label in SIZES:
                d['one.%s.%d.%s' % (impl, n, tag)] = ('%s round, %d workers%s: kvs / Open MPI'
                                                      % (label, n, how), lims[tag], 'x')
        d['one.%s.2.resnet50' % impl] = ('ResNet-50 step (161 keys), 2 workers%s: kvs / 161 '
                                         'MPI_Allreduce' % how,
                                         ONE_HOST_LIMITS[(impl, 2)]['resnet50'], 'x')
    # By copy, with kvsd writing the outs in place: against Open MPI, and
    # against the one-copy floor measured in the same run (bench/onecopy).
    for n in (2, 4):
        for tag, _, label in SIZES:
            if tag == '4K':
                continue
            d['one.copy1.%d.%s' % (n, tag)] = ('%s round, %d workers, by copy: kvs / Open MPI '
                                               '(the one-copy goal)' % (label, n), 0.8, 'x')
            d['one.floor.%d.%s' % (n, tag)] = ('%s round, %d workers, by copy: kvs / the one-copy '
                                               'floor (bench/onecopy)' % (label, n), 1.2, 'x')
    # A training loop's rhythm: each round after 1 ms of compute on the CPU
    # (scripts/bench's case allreduce-c1ms), kvs by copy against Open MPI.
    d['one.compute.2.4K'] = ('4 KiB round after 1 ms of compute, 2 workers: kvs / Open MPI',
                             1.2, 'x')
    d['one.idle'] = ('idle job: CPU of the waiting worker and kvsd, % of the wait', 1.0, '%')
    d['tl.4K'] = ('timeline on (KVS_TIMELINE), 4 KiB round, 2 workers: on / off', 1.05, 'x')
    d['tl.64M'] = ('timeline on, 64 MiB round, 2 workers: on / off', 1.01, 'x')
    d['hosts.mpi.64M'] = ('across hosts, 64 MiB: kvs (io_uring) / Open MPI over TCP', 0.5, 'x')
    d['hosts.mpi.resnet50'] = ('across hosts, ResNet-50 step: kvs (io_uring) / Open MPI over TCP',
                               0.6, 'x')
    for tag in ('4K', '256K', '4M'):
        d['hosts.mpi.' + tag] = ('across hosts, %s: kvs (io_uring) / Open MPI over TCP'
                                 % LABEL[tag], 1.0, 'x')
    for tag, label in list(LABEL.items()):
        d['hosts.sock.' + tag] = ('across hosts, %s: io_uring / sockets' % label, 1.05, 'x')
    d['hosts.ucx.64M'] = ('across hosts, 64 MiB: UCX (its tcp) / io_uring', 1.2, 'x')
    for tr in ('uring', 'socket', 'ucx'):
        d['hosts.idle.' + tr] = ('idle across hosts over %s: CPU of the waiting worker and its kvsd'
                                 % tr, 0.1, 's')
    d['keys.dist'] = ('200,000 keys, dist_sync, 2 workers: init + pushpull', 0.5, 's')
    d['py.call.4K'] = ('Python call, 4 KiB: time added to the C call', 5.0, 'us')
    d['py.call.64M'] = ('Python call, 64 MiB: Python / C', 1.02, 'x')
    d['py.trainer'] = ('Trainer step, ResNet-50, 2 workers: kvs.torch.Trainer / DDP on gloo',
                       0.5, 'x')
    d['py.hook'] = ('DDP step, ResNet-50, 2 workers: time kvs.torch.allreduce_hook adds over '
                    'DDP\'s gloo hook / gloo\'s communication time', 0.5, 'x')
    d['py.distopt.ddp'] = ('MLP 8 x 2048^2 step, batch 64, 2 workers: '
                           'kvs.torch.DistributedOptimizer / DDP on gloo', 0.8, 'x')
    d['py.distopt.trainer'] = ('the same step: kvs.torch.DistributedOptimizer / kvs.torch.Trainer',
                               0.9, 'x')
    d['rows.small'] = ('row-sparse step (4,000,000 x 64 table, 4,096 Zipf(1.1) ids per worker, '
                       'adam, 4 workers) / dense pushpull of 4,096 x 64', 2.0, 'x')
    d['rows.table'] = ('the same step / dense pushpull of the whole 4,000,000 x 64 table',
                       1 / 200, 'x')
    d['rows.full'] = ('100% density, 1,000,000 x 64, 4 workers: row-sparse push+pull / dense '
                      'pushpull', 1.3, 'x')
    d['rows.rss'] = ('worker VmRSS during the sparse steps of the 4,000,000 x 64 table',
                     10.0, '%t')
    d['rows.ddp'] = ('CTR model of examples/train_ctr.py, 4 processes, a training step: '
                     'kvs.torch.Trainer (set_rows) / DDP on gloo with nn.Embedding(sparse=True)',
                     0.3, 'x')
    d['recover.commit'] = ('a commit of a 1 GiB store, in memory: the workers\' wait in kvs_commit',
                           0.1, 's')
    d['recover.disk'] = ('with --checkpoint: the snapshot\'s copy to disk / dd conv=fsync of as '
                         'many bytes in the same directory (1.25: 80% of dd\'s speed)', 1.25, 'x')
    d['recover.stall'] = ('with --checkpoint: a round right after a commit / the other rounds',
                          1.1, 'x')
    d['recover.worker'] = ('a worker killed, 1 GiB store: to the survivor\'s next successful round, '
                           'its replacement started', 2.0, 's')
    d['recover.kvsd'] = ('kvsd killed, 1 GiB snapshot: to the next successful round, less the time '
                         'to read the snapshot at disk speed', 2.0, 's')
    d['recover.chaos'] = ('the kill loop (scripts/chaos): its slowest recovery, a death to the new '
                          'kvsd serving', 2.0, 's')
    return d


class Results:
    def __init__(self, path):
        with open(path) as f:
            self.text = f.read()
        self.path = path
        lines = self.text.split('\n')
        self.lines = lines
        m = re.search(r'on (\d{4}-\d\d-\d\d) [0-9:]+ UTC; (\d+) s for the whole run', self.text)
        if not m:
            raise Bad('%s: no "Written by scripts/bench on DATE; N s" line' % path)
        self.date, self.seconds = m.group(1), int(m.group(2))
        m = re.search(r'(\d+) CPUs online', self.text)
        self.cpus = int(m.group(1)) if m else None
        m = re.search(r'kvs: commit ([0-9a-f]+)', self.text)
        self.commit = m.group(1) if m else 'unknown'
        self.one, self.hosts, self.veth, self.scale, self.rows = [], [], [], [], []
        self.passes = {}
        self.ctr = {}
        self.recover = {}
        self.goals = {}
        defs = goal_defs()
        for _, head, rows in tables(lines):
            if head[:3] == ['case', 'impl', 'N'] and 'median µs' in head:
                self.one = rows            # not the "Per pass" table, which starts alike
            elif head[:3] == ['case', 'impl', 'N'] and 'pass 1 µs' in head:
                for x in rows:
                    self.passes[(x['case'], x['impl'], x['N'], x['size'])] = [
                        num(x[h]) for h in head if h.startswith('pass ') and num(x[h])]
            elif head[:2] == ['size', 'kvs, io_uring µs']:
                self.hosts = rows
            elif head[:1] == ['over veth']:
                self.veth = rows
            elif head[:3] == ['case', 'transport', 'hosts']:
                self.scale = rows
            elif head[:1] == ['rows case']:
                self.rows = rows
            elif head[:1] == ['recover id']:
                self.recover = {x['recover id']: x for x in rows}
            elif head[:1] == ['ctr impl']:
                self.ctr = {x['ctr impl']: x for x in rows}
            elif head[:2] == ['id', 'goal']:
                for r in rows:
                    gid = r['id'].strip('`')
                    if gid not in defs:
                        raise Bad('%s: unknown goal %s' % (path, gid))
                    what, lim, unit = defs[gid]
                    vals = [float(v) for v in r['per-pass values'].split() if v != '-']
                    g = Goal(gid, what, lim, unit, vals)
                    if r['verdict'] != g.verdict:
                        raise Bad('%s: goal %s says %s, its values say %s'
                                  % (path, gid, r['verdict'], g.verdict))
                    self.goals[gid] = g
        self.legacy = not self.goals
        if self.legacy:
            self.read_legacy(defs)
        self.pyc = re.search(r'C ([0-9.]+) us, Python ([0-9.]+) us', self.text)
        self.words = {}
        for key, pat in (('keys', r'^dist_sync, 2 workers, 200000 keys[^\n]*'),
                         ('keys_local', r'^local, 1 worker, 200000 keys[^\n]*'),
                         ('mpi_idle', r'Open MPI, same wait: the waiting rank used\s+([0-9.]+) s '
                          r'of CPU in ([0-9.]+) s')):
            m = re.search(pat, self.text, re.M)
            self.words[key] = m
        self.fresh = re.search(r'^Data freshness: ([^\n]*)', self.text, re.M)
        self.partial = re.search(r'^A partial run', self.text, re.M) is not None

    def read_legacy(self, defs):
        def add(gid, value_text):
            what, lim, unit = defs[gid]
            self.goals[gid] = Goal(gid, what, lim, unit, [float(value_text)], value_text)
        for line in self.lines:
            for pat, gid in LEGACY:
                if re.match(pat, line):
                    m = re.search(r'(?:met|MISSED) \(([0-9.]+);', line)
                    if m:
                        add(gid, m.group(1))
            m = re.match(r'^idle job uses no CPU.*worker ([0-9.]+) s \+ kvsd ([0-9.]+) s of CPU '
                         r'in a ([0-9.]+) s wait', line)
            if m:
                v = 100 * (float(m.group(1)) + float(m.group(2))) / float(m.group(3))
                add('one.idle', '%.2f' % v)
            m = re.match(r'^dist_sync, 2 workers, 200000 keys.*both ([0-9.]+) s', line)
            if m:
                add('keys.dist', m.group(1))
            m = re.match(r'^Python call, 4 KiB.*C ([0-9.]+) us, Python ([0-9.]+) us', line)
            if m:
                add('py.call.4K', '%.2f' % (float(m.group(2)) - float(m.group(1))))
            # The older run's 64 MiB comparison set Python pushing one warm
            # array against C refilling fresh values each round: not quoted.
            m = re.match(r'^Trainer step.*: ([0-9.]+) x;', line)
            if m:
                add('py.trainer', m.group(1))
        # The zero-copy goals the older run did not judge: the table's ratio.
        for r in self.one:
            if r['impl'] != 'kvs-dist-zc' or r['case'] != 'allreduce':
                continue
            tag = {label: t for t, _, label in SIZES}.get(r['size'])
            gid = 'one.zc.%s.%s' % (r['N'], tag)
            if tag and gid not in self.goals and gid in defs:
                add(gid, r['× MPI'])

    # -- lookups
    def row(self, impl, n, size, case='allreduce'):
        for r in self.one:
            if r['case'] == case and r['impl'] == impl and r['N'] == str(n) and r['size'] == size:
                return r
        return None

    def us(self, impl, n, size, case='allreduce'):
        r = self.row(impl, n, size, case)
        return num(r['median µs']) if r else None

    def peer_spread(self, n, size, case='allreduce'):
        """(fastest, slowest) of Open MPI's per-pass medians when they differ
        by more than PEER_SPREAD × in this run, else None."""
        v = self.passes.get((case, 'mpi', str(n), size), [])
        if len(v) < 2 or max(v) <= PEER_SPREAD * min(v):
            return None
        return min(v), max(v)

    def floor_ratio(self, n, size, case='allreduce'):
        """kvs by copy over the one-copy floor, the median of the per-pass
        ratios (both measured in each pass); None when not measured."""
        k = self.passes.get((case, 'kvs-dist', str(n), size), [])
        f = self.passes.get((case, 'floor-1copy', str(n), size), [])
        ratios = [a / b for a, b in zip(k, f) if b > 0]
        return median(ratios) if ratios else None

    def goal(self, gid):
        if gid in self.goals:
            return self.goals[gid]
        what, lim, unit = goal_defs().get(gid, ('', 0.0, 'x'))
        return Goal(gid, what, lim, unit, [])


# ---- rendering ---------------------------------------------------------------

def t_us(us):
    """A time given in µs, in the unit that reads best."""
    if us is None:
        return '-'
    if us < 100:
        return '%.1f µs' % us
    if us < 1000:
        return '%.0f µs' % us
    if us < 10000:
        return '%.2f ms' % (us / 1000)
    if us < 1e6:
        return '%.1f ms' % (us / 1000)
    return '%.2f s' % (us / 1e6)


def source(r, long=False):
    s = '`bench/RESULTS.md`: the full run of %s, commit %s' % (r.date, r.commit)
    if r.legacy and long:
        s += (' (a run before per-pass judging: its ratios are ratios of the medians, to 2 digits, '
              'and one its digits cannot place on either side of its limit is left undecided; '
              'rerun `scripts/bench`)')
    return s


def cell(g, detail=''):
    if g.value is None:
        return 'not measured'
    return '%s%s: %s' % (g.show(), detail, g.verdict_md())


def oversubscribed(r, n):
    return r.cpus is not None and n > r.cpus


OVER_WHY = ('Rows marked *oversubscribed* run more processes than the machine has cores '
            '(%s workers on %s cores, kvsd besides). That hurts Open MPI most: its ranks poll '
            'while they wait, so a waiting rank holds a core the rank it waits for needs, '
            'until the scheduler takes it away; kvs\'s workers and kvsd sleep while they wait '
            'and give their core up at once.')


def limits(gc, gz):
    """The goal cell of a row judged by copy (gc) and zero-copy (gz)."""
    if gc.limit == gz.limit:
        return '≤ %g' % gc.limit
    return '≤ %g; zero-copy ≤ %g' % (gc.limit, gz.limit)


def peer_note(r, n, label):
    """'' or, where Open MPI's passes of this case differ by more than
    PEER_SPREAD × in the run, the spread and kvs by copy against the
    one-copy floor of the same passes."""
    spread = r.peer_spread(n, label)
    if not spread:
        return ''
    floor = r.floor_ratio(n, label)
    apart = '; Open MPI\'s passes %s to %s, over %g × apart' % (t_us(spread[0]), t_us(spread[1]),
                                                             PEER_SPREAD)
    return apart + (': kvs %.2f × the one-copy floor of the same passes' % floor if floor else '')


def r_speed_one_host(r):
    how = ('each ratio is the median of the per-pass ratios (each pass\'s kvs median over the '
           'same pass\'s Open MPI median), and each goal is judged on it, unrounded')
    if r.legacy:
        how = 'each ratio is as that run printed it'
    out = ['From %s, on a %s-core machine: a `dist_sync` round\'s time over Open MPI\'s in the '
           'same run, with the medians of the times; %s.' % (source(r, True), r.cpus or '?', how), '',
           '| case | kvs, by copy | kvs, zero-copy | goal |', '|---|---|---|---|']
    for n in (2, 4):
        for tag, _, label in SIZES:
            gc, gz = r.goal('one.copy.%d.%s' % (n, tag)), r.goal('one.zc.%d.%s' % (n, tag))
            mpi = r.us('mpi', n, label)
            name = '%s, %d workers' % (label, n)
            if oversubscribed(r, n):
                name += ' (*oversubscribed*)'
            c = cell(gc, ' (%s against %s%s)' % (t_us(r.us('kvs-dist', n, label)), t_us(mpi),
                                                 peer_note(r, n, label)) if mpi else '')
            z = cell(gz, ' (%s)' % t_us(r.us('kvs-dist-zc', n, label)) if mpi else '')
            out.append('| %s | %s | %s | %s |' % (name, c, z, limits(gc, gz)))
    gc, gz = r.goal('one.copy.2.resnet50'), r.goal('one.zc.2.resnet50')
    out.append('| ResNet-50 step, 161 keys, 2 workers | %s | %s | %s |' % (
        cell(gc, ' (%s against %s)' % (t_us(r.us('kvs-dist', 2, '97.5 MiB', 'resnet50')),
                                       t_us(r.us('mpi', 2, '97.5 MiB', 'resnet50')))),
        cell(gz, ' (%s)' % t_us(r.us('kvs-dist-zc', 2, '97.5 MiB', 'resnet50'))),
        limits(gc, gz)))
    gi = r.goal('one.idle')
    mpi_idle = ''
    if r.words['mpi_idle']:
        mpi_idle = '; Open MPI\'s waiting rank: %.0f%%' % (
            100 * float(r.words['mpi_idle'].group(1)) / float(r.words['mpi_idle'].group(2)))
    out.append('| a job waiting in a barrier: CPU over the wait | %s | | ≤ 1%% (no CPU%s) |'
               % (cell(gi), mpi_idle))
    out.append('')
    gloo = [(num(x['× gloo']), x) for x in r.one
            if x['impl'] in ('kvs-dist', 'kvs-dist-zc') and num(x.get('× gloo', '')) is not None]
    peers = [num(x['× MPI']) for x in r.one if x['impl'] == 'torch-gloo']
    if gloo:
        worst = max(gloo, key=lambda v: v[0])
        slower = all(p is not None and p > 1 for p in peers)
        out.append('torch\'s gloo is %s; a kvs round takes at most %.2f of gloo\'s time (%s, %s '
                   'workers, %s).' % (
                       'slower than Open MPI in every case here' if slower else
                       'not slower than Open MPI in every case here',
                       worst[0], worst[1]['size'] if worst[1]['case'] == 'allreduce' else
                       'ResNet-50', worst[1]['N'],
                       'zero-copy' if worst[1]['impl'].endswith('zc') else 'by copy'))
    if oversubscribed(r, 4):
        out += ['', OVER_WHY % (4, r.cpus)]
    return out


def r_goals(r):
    out = ['Every goal of `scripts/bench`, from %s; per-pass values are in '
           '[bench/RESULTS.md](../bench/RESULTS.md):' % source(r, True), '',
           '| goal | limit | value | verdict |', '|---|---|---|---|']
    defs = goal_defs()
    met = judged = 0
    for gid in defs:
        g = r.goal(gid)
        if g.value is None and gid.startswith(('hosts.ucx', 'hosts.idle.ucx', 'recover.')):
            continue
        judged += g.verdict in ('met', 'missed')
        met += g.verdict == 'met'
        out.append('| %s | %s | %s | %s |' % (g.what, limit_md(g), g.show() if g.value is not None else '-',
                                               g.verdict_md()))
    out += ['', '%d of the %d goals judged are met.' % (met, judged)]
    return out


def hosts_cols(r):
    return [c for c in ('kvs, io_uring µs', 'kvs, sockets µs', 'kvs, UCX µs', 'Open MPI, TCP µs',
                        'Open MPI, UCX µs', 'torch gloo µs', 'TCP floor µs')
            if r.hosts and c in r.hosts[0] and any(num(x[c]) is not None for x in r.hosts)]


def r_speed_hosts(r):
    if not r.hosts:
        return ['The last full run (%s) has no across-hosts step.' % source(r)]
    tags = {'4 KiB': '4K', '256 KiB': '256K', '4 MiB': '4M', '64 MiB': '64M',
            'ResNet-50': 'resnet50'}
    out = ['The latest full run (%s), 2 hosts × 2 workers on one %s-core machine '
           '(*oversubscribed*: 4 workers and 2 kvsd on %s cores, and Open MPI\'s 4 ranks likewise), '
           'median times of the passes; the ratios are medians of the per-pass ratios where a goal '
           'judges them, ratios of the medians elsewhere:' % (source(r), r.cpus, r.cpus), '',
           '| size | kvs, io_uring | × Open MPI, TCP | × gloo | × TCP floor | io_uring / sockets '
           '| goals |', '|---|---|---|---|---|---|---|']
    for x in r.hosts:
        tag = tags.get(x['size'])
        gm, gs = r.goal('hosts.mpi.%s' % tag), r.goal('hosts.sock.%s' % tag)
        xm = '%s (%s)' % (gm.show(), t_us(num(x['Open MPI, TCP µs']))) if gm.value is not None \
            else '%s (%s)' % (x['io_uring × MPI'], t_us(num(x['Open MPI, TCP µs'])))
        xs = gs.show() if gs.value is not None else '-'
        goals = []
        if gm.value is not None:
            goals.append('≤ %g × MPI: %s' % (gm.limit, gm.verdict_md()))
        if gs.value is not None:
            goals.append('io_uring ≤ %g × sockets: %s' % (gs.limit, gs.verdict_md()))
        out.append('| %s | %s | %s | %s | %s (%s) | %s | %s |' % (
            x['size'], t_us(num(x['kvs, io_uring µs'])), xm, x['× gloo'], x['× floor'],
            t_us(num(x['TCP floor µs'])), xs, '; '.join(goals)))
    if r.veth:
        v = r.veth
        out += ['', 'Over veth (each host in a network namespace of its own): %s.' % '; '.join(
            '%s %s, %s × its TCP floor' % (x['over veth'], t_us(num(x['kvs, io_uring µs'])),
                                            x['× floor']) for x in v)]
    return out


def r_speed_transports(r):
    cols = hosts_cols(r)
    if 'kvs, UCX µs' not in cols:
        return ['The last full run (%s) has no UCX column: the UCX plug-in was not built there.'
                % source(r)]
    out = ['The latest full run (%s), 2 hosts × 2 workers on one %s-core machine '
           '(*oversubscribed*), median times:' % (source(r), r.cpus), '',
           '| size | ' + ' | '.join(c.replace(' µs', '') for c in cols) + ' | UCX / io_uring |',
           '|---|' + '---|' * (len(cols) + 1)]
    for x in r.hosts:
        out.append('| %s | %s | %s |' % (x['size'], ' | '.join(t_us(num(x[c])) for c in cols),
                                          x.get('UCX / io_uring', '-')))
    g = r.goal('hosts.ucx.64M')
    out += ['', 'Goal: UCX at most %g × io_uring at 64 MiB: %s.' % (g.limit, cell(g))]
    return out


def r_hosts_idle(r):
    parts = []
    for tr, name in (('uring', 'io_uring'), ('socket', 'sockets'), ('ucx', 'UCX')):
        g = r.goal('hosts.idle.' + tr)
        if g.value is not None:
            parts.append('%s over %s (%s)' % (g.show(), name, g.verdict_md()))
    if not parts:
        return ['The last full run (%s) did not measure an idle job across hosts.' % source(r)]
    return ['In the latest full run (%s), an idle, connected job of 2 hosts (one worker waits in a '
            'barrier for the other) spent, in the waiting worker and its host\'s `kvsd`: %s '
            '(goal: under 0.1 s).' % (source(r), ', '.join(parts))]


def r_keys(r):
    g = r.goal('keys.dist')
    if g.value is None:
        return ['The last full run (%s) did not run `bench/bench_keys`.' % source(r)]
    loc = ''
    if r.words['keys_local']:
        m = re.search(r'both ([0-9.]+) s', r.words['keys_local'].group(0))
        loc = '; %s s in `local`' % m.group(1) if m else ''
    per = ' (runs: %s s)' % ', '.join('%.3f' % v for v in g.values) if not g.legacy else ''
    return ['`bench/bench_keys` times one `kvs_init` and one `kvs_pushpull` of 200,000 one-element '
            'keys. In the latest full run (%s), with 2 `dist_sync` workers: %s, the median of its '
            'runs%s, against a goal of %g s: %s%s.' % (source(r), g.show(), per, g.limit,
                                                         g.verdict_md(), loc)]


def r_python(r):
    a, b, c = r.goal('py.call.4K'), r.goal('py.call.64M'), r.goal('py.trainer')
    if a.value is None and c.value is None:
        return ['The last full run (%s) did not run `bench/bench_python.py`.' % source(r)]
    out = ['In the latest full run (%s), medians:' % source(r), '']
    if a.value is not None:
        extra = ''
        if r.pyc and r.legacy:
            extra = ' (C %s µs, Python %s µs)' % (r.pyc.group(1), r.pyc.group(2))
        out.append('- a `pushpull` of 4 KiB from Python costs %s more than from C%s; goal: at most '
                   '%g µs added: %s;' % (a.show(), extra, a.limit, a.verdict_md()))
    if b.value is None and r.legacy:
        out.append('- at 64 MiB that run compared Python pushing the same warm array with C '
                   'refilling fresh values each round, so its figure is not quoted;')
    if b.value is not None:
        fresh = (' data freshness: %s' % r.fresh.group(1).rstrip('.') if r.fresh else
                 ' (that run pushed the same warm array from Python against fresh values from C '
                 'each round, so it does not compare like with like)')
        out.append('- at 64 MiB Python\'s call takes %s × the C call\'s time;%s; goal: at most '
                   '%g ×: %s;' % (b.show(), fresh, b.limit, b.verdict_md()))
    if c.value is not None:
        out.append('- a `kvs.torch.Trainer` step of ResNet-50\'s 161 tensors with 2 workers and the '
                   'store\'s SGD takes %s × the time of torch\'s DistributedDataParallel on gloo; '
                   'goal: at most %g ×: %s.' % (c.show(), c.limit, c.verdict_md()))
    h = r.goal('py.hook')
    if h.value is not None:
        out.append('- a DDP step of the same model with `kvs.torch.allreduce_hook` takes longer '
                   'than with DDP\'s own hook on gloo by %s × gloo\'s communication time (gloo\'s '
                   'step less that of a hook that exchanges nothing; negative: faster); goal: at '
                   'most %g ×: %s.' % (h.show(), h.limit, h.verdict_md()))
    d, t = r.goal('py.distopt.ddp'), r.goal('py.distopt.trainer')
    if d.value is not None and t.value is not None:
        if out[-1].endswith('.'):
            out[-1] = out[-1][:-1] + ';'
        out.append('- a `kvs.torch.DistributedOptimizer` step of an MLP of 8 layers of 2048 x 2048 '
                   '(batch 64, 2 workers, the store\'s SGD) takes %s × the time of DDP on gloo '
                   '(goal: at most %g ×: %s) and %s × that of the `Trainer` (goal: at most %g ×: '
                   '%s).' % (d.show(), d.limit, d.verdict_md(), t.show(), t.limit, t.verdict_md()))
    return out


def r_status_python(r):
    """The README's line: each way's step against DDP on gloo, judged."""
    said = []
    for what, gid in (('a Trainer step of ResNet-50 takes %s × DDP\'s on gloo (%s)', 'py.trainer'),
                      ('the DDP hook adds %s × gloo\'s communication time (%s)', 'py.hook'),
                      ('a DistributedOptimizer step takes %s × DDP\'s (%s)', 'py.distopt.ddp')):
        g = r.goal(gid)
        if g.value is not None:
            said.append(what % (g.show(), g.verdict))
    if not said:
        return ['not benchmarked in the latest full run (%s)' % r.date]
    return ['in the latest full run (%s): %s' % (r.date, '; '.join(said))]


def r_timeline(r):
    a, b = r.goal('tl.4K'), r.goal('tl.64M')
    if a.value is None and b.value is None:
        return ['The last full run (%s) did not time the timeline.' % source(r)]
    out = []
    for g, label in ((a, '4 KiB'), (b, '64 MiB')):
        if g.value is None:
            continue
        per = ' (passes: %s)' % ', '.join('%.3f' % v for v in g.values) if not g.legacy else ''
        out.append('%s rounds with it on take %s × their time with it off, the median of the '
                   'per-pass ratios%s; goal: at most %g ×: %s.' % (label, g.show(), per, g.limit,
                                                                   g.verdict_md()))
    return ['In the latest full run (%s): %s' % (source(r), ' '.join(out))]


def within(ratio, lo, hi):
    """'yes' when lo <= ratio <= hi: judged from the ratio itself, since older
    runs' tables repeat the column name "within 25%"."""
    return 'yes' if lo <= ratio <= hi else 'no'


def r_scale(r):
    if not r.scale:
        return ['The last full run (%s) has no scale step; `scripts/bench --only scale` runs it '
                'alone (`bench/scale.csv`, `bench/scale.png`), and a full run puts it here.'
                % source(r)]
    copies = 'model with copies µs' in r.scale[0]
    out = ['The latest full run (%s), H hosts × 1 worker on one %s-core machine, medians of the '
           'passes against the model at the loopback\'s rate (each host\'s bytes over this '
           'machine\'s one loopback)%s:' % (
               source(r), r.cpus,
               ' and against the model that adds every host\'s copies and sums in memory at the '
               'machine\'s copy bandwidth (`kvsctl plan --memory`)' if copies else ''), '']
    if copies:
        out += ['| case | transport | hosts | measured | model | measured / model | within 25% '
                '| model with copies | measured / that | within 1.5 × |',
                '|---|---|---|---|---|---|---|---|---|---|']
    else:
        out += ['| case | transport | hosts | measured | model | measured / model | within 25% |',
                '|---|---|---|---|---|---|---|']
    for x in r.scale:
        ratio = num(x['measured / model'])
        line = '| %s | %s | %s | %s | %s | %s | %s |' % (
            x['case'], x['transport'], x['hosts'], t_us(num(x['measured µs'])),
            t_us(num(x['model µs'])), x['measured / model'], within(ratio, 0.75, 1.25))
        if copies:
            rc = num(x['measured / with copies'])
            line += ' %s | %s | %s |' % (t_us(num(x['model with copies µs'])),
                                         x['measured / with copies'], within(rc, 0, 1.5))
        out.append(line)
    return out


def r_status_one_host(r):
    g, z = r.goal('one.copy.2.4K'), r.goal('one.zc.2.4K')
    defs = goal_defs()
    one = [r.goal(k) for k in defs if k.startswith('one.')]
    judged = [x for x in one if x.value is not None]
    met = sum(x.verdict == 'met' for x in judged)
    more = len(one) - len(judged)
    return ['4 KiB with 2 workers takes %s × Open MPI\'s time (%s zero-copy%s); %d of its %d '
            'goals on one host met in the latest full run (%s)%s'
            % (g.show(), z.show(), peer_note(r, 2, '4 KiB'), met, len(judged), r.date,
               '; %d more not measured in it' % more if more else '')]


def r_status_hosts(r):
    hs = [r.goal(k) for k in goal_defs() if k.startswith('hosts.')]
    hs = [x for x in hs if x.value is not None]
    met = sum(x.verdict == 'met' for x in hs)
    return ['benchmarked: %d of its %d speed goals met in the latest full run (%s)'
            % (met, len(hs), r.date)]


def r_status_scale(r):
    if not r.scale:
        return ['the measured rounds are not in the latest full run (%s)' % r.date]
    v = [num(x['measured / model']) for x in r.scale]
    inside = sum(within(x, 0.75, 1.25) == 'yes' for x in v)
    line = ('the measured rounds are %.1f-%.1f × the byte model at the loopback\'s rate, %d of %d '
            'within 25%%' % (min(v), max(v), inside, len(v)))
    if 'measured / with copies' in r.scale[0]:
        c = [num(x['measured / with copies']) for x in r.scale]
        line += ('; %.2f-%.2f × the model that also counts the copies in memory, %d of %d within '
                 '1.5 ×' % (min(c), max(c), sum(x <= 1.5 for x in c), len(c)))
    return [line + ' (latest full run, %s)' % r.date]


def ctr_line(r):
    """The rows table's line of the CTR model against DDP, from RESULTS.md's
    "CTR model against DDP"."""
    k, d = r.ctr.get('kvs'), r.ctr.get('ddp')
    g = r.goal('rows.ddp')
    if not k or not d:
        return ('| the CTR model of `examples/train_ctr.py`, 4 processes: a training step with '
                '`kvs.torch.Trainer` | not measured | | DDP on gloo, `nn.Embedding(sparse=True)` '
                '| not measured (`scripts/bench --only ctr`) |')

    def mem(x):
        v = num(x['worker VmRSS MiB'])
        sh = num(x.get('of it RssShmem MiB', '-'))
        return '%.0f MiB%s (peak %.0f MiB)' % (v, ', %.0f MiB of it shared with kvsd' % sh
                                               if sh else '', num(x['worker VmHWM MiB']))
    name = ('the CTR model of `examples/train_ctr.py` (%s x %s table, batches of %s), %s processes: '
            'a training step with `kvs.torch.Trainer`, its rows pushed and the next rows pulled'
            % ('{:,}'.format(int(num(k['rows']))), k['dim'], '{:,}'.format(int(num(k['batch']))),
               k['N']))
    if oversubscribed(r, int(num(k['N']))):
        name += ' (*oversubscribed*)'
    return '| %s | %s | workers %s, kvsd %s MiB | DDP on gloo, `nn.Embedding(sparse=True)`: %s, ' \
           'workers %s | %s |' % (
               name, t_us(num(k['median step µs'])), mem(k), '%.0f' % num(k['kvsd VmRSS MiB']),
               t_us(num(d['median step µs'])), mem(d),
               '%s: %s (≤ %s)' % (g.show(), g.verdict_md(), limit_md(g)[2:])
               if g.value is not None else 'not measured')


def r_rows(r):
    """The row-sparse step's table, from RESULTS.md's "Row-sparse tables",
    and the CTR model against DDP."""
    if not r.rows and not r.ctr:
        return ['Row-sparse tables: not measured: the last full run (%s) has no rows or ctr step; '
                '`scripts/bench --only rows,ctr` runs them alone.' % source(r)]
    if not r.rows:
        return ['From %s, on a %s-core machine: the slowest worker\'s median step; the ratio is '
                'the median of the per-pass ratios, judged unrounded. The rows step was not run.'
                % (source(r), r.cpus or '?'), '',
                '| case | time | memory | against | goal |', '|---|---|---|---|---|', ctr_line(r)]
    by = {x['id']: x for x in r.rows}
    over = oversubscribed(r, 4)
    out = ['From %s, on a %s-core machine%s: `dist_sync`, adam, the slowest worker\'s median '
           'time; each ratio is the median of the per-pass ratios, and each goal is judged on '
           'it, unrounded. Memory is VmRSS, which counts the pages of kvsd\'s shared memory '
           'a worker has mapped (its staging area, the table\'s pages its compact pulls read) '
           'besides its own.' % (source(r), r.cpus or '?',
                               ' (*oversubscribed*: 4 workers and kvsd on %s cores)' % r.cpus
                               if over else ''), '',
           '| case | time | memory | against | goal |', '|---|---|---|---|---|']

    def t(case):
        x = by.get(case)
        return t_us(num(x['median µs'])) if x else '-'

    def mib(case, col):
        x = by.get(case)
        v = num(x[col]) if x and col in x else None
        return '%.0f MiB' % v if v is not None else '-'

    def goal(gid):
        g = r.goal(gid)
        return '%s: %s (≤ %s)' % (g.show(), g.verdict_md(), limit_md(g)[2:]) \
            if g.value is not None else 'not measured'
    name = lambda s: s + (' (*oversubscribed*)' if over else '')
    shared = mib('sparse', 'of it RssShmem MiB')
    out.append('| %s | %s | workers %s%s (peak %s), kvsd %s | dense 4,096 x 64: %s | %s |' % (
        name('4 workers push 4,096 Zipf(1.1) rows each and pull their next 4,096, '
             '4,000,000 x 64 table (1 GiB)'), t('sparse'), mib('sparse', 'worker VmRSS MiB'),
        '' if shared == '-' else ', %s of it memory shared with kvsd' % shared,
        mib('sparse', 'worker VmHWM MiB'), mib('sparse', 'kvsd VmRSS MiB'), t('small'),
        goal('rows.small')))
    out.append('| the same step | | | dense whole table: %s (kvsd %s) | %s |' % (
        t('table'), mib('table', 'kvsd VmRSS MiB'), goal('rows.table')))
    out.append('| the same step: worker memory | | | the table\'s bytes | %s |' % goal('rows.rss'))
    out.append('| %s | %s | kvsd %s | dense pushpull: %s | %s |' % (
        name('100% density: every row of 1,000,000 x 64, row-sparse push+pull'), t('full-sparse'),
        mib('full-sparse', 'kvsd VmRSS MiB'), t('full-dense'), goal('rows.full')))
    out.append(ctr_line(r))
    return out


def r_recover(r):
    """The recovery benchmarks' table, from RESULTS.md's "Recovery"."""
    if not r.recover:
        return ['Not measured: the last full run (%s) has no recover step; `scripts/bench --only '
                'recover` runs it alone (into `_bench/RESULTS.md`), and a full run puts it here.'
                % source(r)]

    def v(rid):
        x = r.recover.get(rid)
        return num(x['median']) if x else None

    def goal(gid):
        g = r.goal(gid)
        return '%s: %s' % (limit_md(g), g.verdict_md()) if g.value is not None else \
            '%s: not measured' % limit_md(g)

    def val(gid, extra=''):
        g = r.goal(gid)
        return g.show() + extra if g.value is not None else '-'

    def rate(rid):
        b, t = v('store.bytes'), v(rid)
        return '%.2f GB/s' % (b / t / 1e9) if b and t and t > 0 else '-'

    def secs(rid):
        t = v(rid)
        return t_us(t * 1e6) if t is not None else '-'
    size = v('store.bytes')
    label = '?'
    if size:
        label = '%.2f GiB' % (size / 2 ** 30) if size >= 2 ** 30 else '%.0f MiB' % (size / 2 ** 20)
    # The same rounds of the job without a checkpoint: what of the ratio
    # the copy to disk does not explain (the rounds after a commit are the
    # job's first ones).
    control = ''
    if v('memory.round') and v('memory.round_after_commit') is not None:
        control = ' (without `--checkpoint`: %s against %s)' % (
            secs('memory.round_after_commit'), secs('memory.round'))
    cached = v('dd.read_cached')
    read = 'from the page cache: the disk was not measured' if cached else 'from the disk'
    out = ['From %s, on a %s-core machine: 2 workers of `bench/bench_recover`, a snapshot of %s, '
           'medians of the passes; each goal is judged on the median of its per-pass values, '
           'unrounded.' % (source(r), r.cpus or '?', label), '',
           '| measure | value | goal |', '|---|---|---|',
           '| a commit, in memory: the workers\' wait (the snapshot written to tmpfs) | %s | %s |'
           % (val('recover.commit'), goal('recover.commit')),
           '| with `--checkpoint`: the copy to disk, %s (%s), against `dd conv=fsync` of as many '
           'bytes, %s (%s) | %s × dd\'s time | %s |' % (
               secs('copy.s'), rate('copy.s'), secs('dd.write_s'), rate('dd.write_s'),
               val('recover.disk'), goal('recover.disk')),
           '| with `--checkpoint`: a round right after a commit, %s, against the others, %s%s | %s '
           '| %s |' % (secs('checkpoint.round_after_commit'), secs('checkpoint.round'), control,
                       val('recover.stall', ' ×'), goal('recover.stall')),
           '| a worker killed: to the survivor\'s next successful round | %s | %s |'
           % (val('recover.worker'), goal('recover.worker')),
           '| kvsd killed: to the next successful round, %s, less the snapshot\'s read, %s (%s, '
           '%s) | %s | %s |' % (secs('checkpoint.recover_kvsd'), secs('dd.read_s'),
                                rate('dd.read_s'), read, val('recover.kvsd'), goal('recover.kvsd'))]
    if v('chaos.kills') is not None:
        same = v('chaos.identical')
        out.append('| the kill loop (`scripts/chaos`: %d workers, %d steps, a commit every %d): %d '
                   'kills (%d of kvsd), %d restarts, %d steps redone, %s; final values %s | '
                   'slowest recovery %s | %s |' % (
                       v('chaos.workers') or 0, v('chaos.steps') or 0, v('chaos.every') or 0,
                       v('chaos.kills'), v('chaos.kvsd_kills') or 0, v('chaos.restarts') or 0,
                       v('chaos.redone') or 0, secs('chaos.seconds'),
                       'bit for bit the fault-free run\'s' if same else 'not compared',
                       val('recover.chaos'), goal('recover.chaos')))
    return out


def r_status_recover(r):
    gs = [r.goal(k) for k in goal_defs() if k.startswith('recover.')]
    gs = [x for x in gs if x.value is not None]
    if not gs:
        return ['not benchmarked in the latest full run (%s)' % r.date]
    met = sum(x.verdict == 'met' for x in gs)
    # The numbers a reader weighs a recovery by, where they were measured.
    said = [(what, r.goal(gid)) for what, gid in (
        ('a commit of 1 GiB waited %s', 'recover.commit'),
        ('a worker\'s death cost %s to the next round', 'recover.worker'),
        ('kvsd\'s death %s', 'recover.kvsd'),
        ('the kill loop\'s slowest recovery took %s', 'recover.chaos'))]
    said = [what % t_us(g.value * 1e6) for what, g in said if g.value is not None]
    return ['benchmarked: %d of its %d goals met in the latest full run (%s)%s'
            % (met, len(gs), r.date, ': ' + ', '.join(said) if said else '')]


REGIONS = {
    'rows': r_rows,
    'speed-one-host': r_speed_one_host,
    'goals': r_goals,
    'speed-hosts': r_speed_hosts,
    'speed-transports': r_speed_transports,
    'hosts-idle': r_hosts_idle,
    'keys': r_keys,
    'python': r_python,
    'timeline-cost': r_timeline,
    'scale': r_scale,
    'status-one-host': r_status_one_host,
    'status-hosts': r_status_hosts,
    'status-scale': r_status_scale,
    'recover': r_recover,
    'status-recover': r_status_recover,
    'status-python': r_status_python,
}


def fix_links(lines, doc):
    """Links are written from doc/; README.md sits one folder up."""
    if os.path.dirname(doc):
        return lines
    return [l.replace('](../', '](') for l in lines]


# ---- regions ---------------------------------------------------------------------

OPEN = re.compile(r'<!-- bench:([a-z0-9-]+) -->')
CLOSE = '<!-- /bench:%s -->'
FIGURE = [  # what a benchmark figure looks like outside a region
    (re.compile(r'\d(\.\d+)? ?µs\b'), 'a time in µs'),
    (re.compile(r'\d ?GB/s'), 'a rate in GB/s'),
    (re.compile(r'\d(\.\d+)? ?× ?(of )?(Open MPI|MPI|gloo|DDP|sockets|io_uring|the C call|off)\b'),
     'a ratio to a peer'),
    (re.compile(r'goals?\b[^.|]*?(:\s*|\b(is|are|were|was) |\bgoals? )\**(met|missed)\b', re.I),
     'a goal said met or missed'),
    (re.compile(r'\b(met|missed)\b[^.|]*\bgoals?\b[^.|]*\d', re.I), 'a goal said met or missed'),
    (re.compile(r'\d(\.\d+)?(-\d(\.\d+)?)? ?% (faster|slower)'), 'a speed-up in %'),
]


def render_text(text, results, doc):
    """(new text, problems) for one document."""
    lines, out, problems = text.split('\n'), [], []
    i, fence = 0, False
    while i < len(lines):
        line = lines[i]
        m = OPEN.search(line)
        if re.match(r'^\s*(```|~~~)', line):
            fence = not fence
        if not m or fence:
            if not fence:
                for pat, what in FIGURE:
                    if pat.search(line):
                        problems.append('%s:%d: %s outside a bench region: %s'
                                        % (doc, i + 1, what, line.strip()))
                        break
            out.append(line)
            i += 1
            continue
        name = m.group(1)
        if name not in REGIONS:
            problems.append('%s:%d: unknown region bench:%s' % (doc, i + 1, name))
            out.append(line)
            i += 1
            continue
        body = fix_links(REGIONS[name](results), doc)
        close = CLOSE % name
        if close in line[m.end():]:                     # inline: both on one line
            j = line.index(close, m.end())
            if len(body) != 1:
                problems.append('%s:%d: bench:%s renders several lines, not inline' % (doc, i + 1, name))
            out.append(line[:m.end()] + ' '.join(body) + line[j:])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and close not in lines[j]:
            j += 1
        if j == len(lines):
            problems.append('%s:%d: bench:%s is not closed' % (doc, i + 1, name))
            out += lines[i:]
            break
        out += [line] + body + [lines[j]]
        i = j + 1
    return '\n'.join(out), problems


def render(args):
    results = Results(args.results)
    if results.partial and not args.partial:
        raise Bad('%s is from a partial run (--only or --quick): the docs are rendered from a full '
                  'run (--partial renders it anyway, for development)' % args.results)
    root = args.root
    bad, changed = [], []
    for doc in DOCS:
        path = os.path.join(root, doc)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            text = f.read()
        new, problems = render_text(text, results, doc)
        bad += problems
        if new != text:
            changed.append(doc)
            if args.check:
                import difflib
                diff = difflib.unified_diff(text.split('\n'), new.split('\n'), doc,
                                            doc + ' (rendered)', lineterm='', n=1)
                bad.append('%s: a bench region differs from its rendering from %s:\n%s'
                           % (doc, args.results, '\n'.join(list(diff)[:40])))
            else:
                with open(path, 'w') as f:
                    f.write(new)
    for p in bad:
        print(p, file=sys.stderr)
    if not args.check:
        for doc in changed:
            print('rendered', doc)
    if bad:
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('what', choices=['judge', 'render'])
    ap.add_argument('file', nargs='?')
    ap.add_argument('--check', action='store_true')
    ap.add_argument('--root', default=ROOT)
    ap.add_argument('--results')
    ap.add_argument('--partial', action='store_true', help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        if args.what == 'judge':
            if not args.file:
                ap.error('judge needs the file of goal values')
            judge(args.file)
            return 0
        args.results = args.results or os.path.join(args.root, 'bench', 'RESULTS.md')
        return render(args)
    except (Bad, OSError) as e:
        print('claims.py: %s' % e, file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
