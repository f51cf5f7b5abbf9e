#!/usr/bin/env bash
# How `hdsm bench` writes its files when the folder, the disk or the standard streams misbehave.
#   check_bench_files.sh <hdsm executable> <scratch folder> <ON|OFF: gnuplot draws plots>
# Each case runs `bench transfer --quick` (a few seconds with HDSM_SIM_LINK_GBPS=0).
set -uo pipefail
hdsm=$1
work=$2
svg=$3
export HDSM_SIM_LINK_GBPS=0 HDSM_SIM_MEMORY=1GiB
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# A folder that takes no files is refused before any suite runs, not after the measurements.
"$hdsm" bench transfer --quick --out /proc/self >out.txt 2>err.txt
rc=$?
[ "$rc" -eq 1 ] || fail "a folder that takes no files: exit $rc, expected 1"
grep -q "takes no files" err.txt || fail "a folder that takes no files: no message saying so: $(cat err.txt)"
grep -q "^\[transfer" err.txt && fail "a folder that takes no files: the suite ran first"

# A symbolic link planted at an output's name is replaced, not written through; an earlier run's
# report is gone at the start (it would describe this run's files were it interrupted).
mkdir planted
echo precious >victim.txt
ln -s ../victim.txt planted/transfer.csv
echo "an earlier run" >planted/report.md
"$hdsm" bench transfer --quick --out planted >out.txt 2>err.txt || fail "planted link: exit $?: $(cat err.txt)"
[ "$(cat victim.txt)" = precious ] || fail "planted link: the link's target was overwritten"
[ -L planted/transfer.csv ] && fail "planted link: transfer.csv is still a link"
head -n 1 planted/transfer.csv | grep -q "series" || fail "planted link: transfer.csv has no header"
grep -q "an earlier run" planted/report.md && fail "planted link: the earlier report is still there"
ls -A planted | grep -q '^\.' && fail "temporary files left behind: $(ls -A planted)"

# A newline in the folder's name reaches no gnuplot script as a command.
if [ "$svg" = ON ]; then
  "$hdsm" bench transfer --quick --out $'odd\n!touch INJECTED\n' >out.txt 2>err.txt || fail "odd name: exit $?"
  [ -e INJECTED ] && fail "odd name: gnuplot ran the folder name's second line"
  ls $'odd\n!touch INJECTED\n'/*.svg >/dev/null 2>&1 || fail "odd name: no SVG in the folder"
  for f in $'odd\n!touch INJECTED\n'/*.svg; do
    tail -c 16 "$f" | grep -q "</svg>" || fail "odd name: $f is not a whole SVG document"
    grep -q "<title>Gnuplot</title>" "$f" && fail "$f: its title is gnuplot's, not the plot's"
  done
fi

# A closed stderr: messages go nowhere, and never into the files the run opens.
"$hdsm" bench transfer --quick --out closed >/dev/null 2>&- || fail "closed stderr: exit $?"
head -n 1 closed/transfer.csv | grep -q "series" || fail "closed stderr: transfer.csv: $(head -c 200 closed/transfer.csv)"
grep -q "hdsm bench" closed/*.csv closed/*.json && fail "closed stderr: progress text inside the outputs"

# A summary that cannot be written is a failure.
"$hdsm" bench transfer --quick --out full >/dev/full 2>err.txt
rc=$?
[ "$rc" -eq 1 ] || fail "stdout on /dev/full: exit $rc, expected 1"
grep -q "standard output" err.txt || fail "stdout on /dev/full: no message: $(cat err.txt)"

[ "$failures" -eq 0 ] && echo "all cases passed"
exit $((failures != 0))
