#!/bin/sh
# Description: the documentation holds together: README.md is at most 300 lines; every relative link in README.md and doc/**/*.md names a file that exists (and its #anchor, if any, a heading of that file, by GitHub's slug rules); every doc/**/*.md is reachable from README.md by links; and the checker itself fails on a broken link and a broken anchor.
# TAP output. Reads the source tree only ($top_srcdir), so it runs the same
# in a build tree apart from the sources (make distcheck). Links with a
# scheme (https:, mailto:) are not followed; links inside fenced code
# blocks and `code spans` are not links.
set -u
LC_ALL=C
export LC_ALL
top=${top_srcdir:-$(dirname "$0")/..}

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
n_test=0
failed=0
# tap STATUS NAME: the next TAP line; the diagnostics of a failure are in
# $tmp/diag, printed after it.
tap() {
    n_test=$((n_test + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $n_test - $2"
    else
        echo "not ok $n_test - $2"
        failed=1
        sed 's/^/# /' "$tmp/diag"
    fi
    : >"$tmp/diag"
}

# links FILE: "LINE<TAB>TARGET" for each inline link or image ("](target)")
# and each reference definition ("[x]: target") outside code.
links() {
    awk '
        /^[ \t]*(```|~~~)/ { fence = !fence; next }
        fence { next }
        {
            line = $0
            gsub(/`[^`]*`/, "", line)
            if (match(line, /^[ \t]*\[[^]]+\]:[ \t]*[^ \t]+/)) {
                t = substr(line, RSTART, RLENGTH)
                sub(/^[ \t]*\[[^]]+\]:[ \t]*/, "", t)
                sub(/^</, "", t); sub(/>$/, "", t)
                print NR "\t" t
            }
            while (match(line, /\]\([^) \t]+/)) {
                t = substr(line, RSTART + 2, RLENGTH - 2)
                sub(/^</, "", t); sub(/>$/, "", t)
                print NR "\t" t
                line = substr(line, RSTART + RLENGTH)
            }
        }' "$1"
}

# anchors FILE: the anchor of each heading, as GitHub makes them: the text
# lower-cased, punctuation other than "-" and "_" dropped, each space a
# "-"; a repeated anchor gets "-1", "-2", ... (bytes above ASCII are kept,
# as GitHub keeps letters).
anchors() {
    awk '
        /^[ \t]*(```|~~~)/ { fence = !fence; next }
        fence { next }
        /^##*[ \t]/ {
            h = $0
            match(h, /^##*/)
            if (RLENGTH > 6) next
            sub(/^##*[ \t]+/, "", h)
            sub(/[ \t]+##*[ \t]*$/, "", h)
            sub(/[ \t]+$/, "", h)
            h = tolower(h)
            gsub(/[]!"#$%&'\''()*+,.\/:;<=>?@[\\^`{|}~]/, "", h)
            gsub(/[ \t]/, "-", h)
            a = h
            if (h in seen) a = h "-" seen[h]
            seen[h]++
            print a
        }' "$1"
}

# check_file ROOT FILE: every link of ROOT/FILE resolves; the reachable .md
# files are appended to $tmp/found. Returns 1 on a broken link (details in
# $tmp/diag).
check_file() {
    cf_root=$1
    cf_file=$2
    cf_dir=$(dirname "$cf_file")
    cf_rc=0
    links "$cf_root/$cf_file" >"$tmp/links"
    while IFS='	' read -r cf_line cf_target; do
        case $cf_target in
        [a-zA-Z]*:*) continue ;;           # a scheme: https:, mailto:, ...
        esac
        cf_path=${cf_target%%#*}
        cf_frag=
        case $cf_target in *'#'*) cf_frag=${cf_target#*#} ;; esac
        if [ -z "$cf_path" ]; then
            cf_to=$cf_file
        else
            case $cf_path in
            /*) echo "$cf_file:$cf_line: $cf_target: an absolute path" >>"$tmp/diag"
                cf_rc=1; continue ;;
            esac
            cf_to=$cf_dir/$cf_path
        fi
        if [ ! -e "$cf_root/$cf_to" ]; then
            echo "$cf_file:$cf_line: $cf_target: no such file ($cf_to)" >>"$tmp/diag"
            cf_rc=1
            continue
        fi
        case $cf_to in
        *.md) [ -f "$cf_root/$cf_to" ] && echo "$cf_to" >>"$tmp/found" ;;
        esac
        if [ -n "$cf_frag" ]; then
            case $cf_to in
            *.md) ;;
            *) echo "$cf_file:$cf_line: $cf_target: an anchor into a file that is not Markdown" >>"$tmp/diag"
               cf_rc=1; continue ;;
            esac
            if ! anchors "$cf_root/$cf_to" | grep -qxF -- "$cf_frag"; then
                echo "$cf_file:$cf_line: $cf_target: no heading #$cf_frag in $cf_to" >>"$tmp/diag"
                cf_rc=1
            fi
        fi
    done <"$tmp/links"
    return $cf_rc
}

# normalise PATH: PATH without "./" and "dir/.." parts.
normalise() {
    echo "$1" | awk -F/ '{
        n = 0
        for (i = 1; i <= NF; i++) {
            if ($i == "." || $i == "") continue
            if ($i == ".." && n > 0 && p[n] != "..") { n--; continue }
            p[++n] = $i
        }
        s = p[1]
        for (i = 2; i <= n; i++) s = s "/" p[i]
        print s
    }'
}

# reachable ROOT: the .md files reachable from ROOT/README.md by links, one
# a line, normalised.
reachable() {
    rc_root=$1
    echo README.md >"$tmp/seen"
    echo README.md >"$tmp/queue"
    while [ -s "$tmp/queue" ]; do
        rc_file=$(head -n 1 "$tmp/queue")
        sed 1d "$tmp/queue" >"$tmp/queue.next" && mv "$tmp/queue.next" "$tmp/queue"
        : >"$tmp/found"
        check_file "$rc_root" "$rc_file" >/dev/null 2>&1 || true
        while read -r rc_to; do
            rc_to=$(normalise "$rc_to")
            if ! grep -qxF -- "$rc_to" "$tmp/seen"; then
                echo "$rc_to" >>"$tmp/seen"
                echo "$rc_to" >>"$tmp/queue"
            fi
        done <"$tmp/found"
    done
    : >"$tmp/diag"
    cat "$tmp/seen"
}

if [ ! -f "$top/README.md" ]; then
    echo "1..1"
    echo "not ok 1 - README.md is in $top"
    exit 1
fi
(cd "$top" && find doc -name '*.md' -type f | sort) >"$tmp/docs"
n_docs=$(wc -l <"$tmp/docs")
echo "1..$((2 * n_docs + 3))"
: >"$tmp/diag"

lines=$(wc -l <"$top/README.md")
echo "README.md has $lines lines" >"$tmp/diag"
[ "$lines" -le 300 ]
tap $? "README.md is at most 300 lines ($lines)"

: >"$tmp/found"
check_file "$top" README.md
tap $? "every link of README.md resolves"
while read -r f; do
    check_file "$top" "$f"
    tap $? "every link of $f resolves"
done <"$tmp/docs"

reachable "$top" >"$tmp/reached"
while read -r f; do
    echo "$f: no chain of links leads to it from README.md" >"$tmp/diag"
    grep -qxF -- "$f" "$tmp/reached"
    tap $? "$f is reachable from README.md"
done <"$tmp/docs"

# The checker must see what it is for: a tree with one broken link and one
# broken anchor fails, and the same tree mended passes.
mkdir -p "$tmp/t/doc"
printf '# T\n\n[a](doc/a.md) [gone](doc/gone.md)\n' >"$tmp/t/README.md"
printf '# A\n\n## Some heading: here\n\n[back](../README.md#nowhere)\n' >"$tmp/t/doc/a.md"
: >"$tmp/found"
st=0
check_file "$tmp/t" README.md >/dev/null 2>&1 && st=1
check_file "$tmp/t" doc/a.md >/dev/null 2>&1 && st=1
grep -q 'doc/gone.md: no such file' "$tmp/diag" || st=1
grep -q 'no heading #nowhere' "$tmp/diag" || st=1
printf '# T\n\n[a](doc/a.md#some-heading-here)\n' >"$tmp/t/README.md"
printf '# A\n\n## Some heading: here\n\n[back](../README.md#t)\n' >"$tmp/t/doc/a.md"
: >"$tmp/diag"
check_file "$tmp/t" README.md || st=1
check_file "$tmp/t" doc/a.md || st=1
[ "$st" -eq 0 ] || echo "the checker missed a broken link or anchor, or failed a good one" >>"$tmp/diag"
tap $st "the checker fails on a broken link and a broken anchor, and passes them mended"

exit $failed
