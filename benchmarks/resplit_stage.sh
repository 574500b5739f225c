#!/usr/bin/env bash
# Re-split the staged GPU packs (.whl/pNN from ../shared/gpu/stage.sh) into smaller parts.
#
# The device tool carries the working tree (tracked files) plus the paths named in `carry`, 64 MiB in
# all. stage.sh cuts its packs at 46 MiB; once the tracked tree (mostly benchmarks/results/raw) passes ≈ 18 MiB a
# part no longer fits beside it ("the working tree is larger than 64 MiB"). This rewrites the same bytes
# as .whl/p01 ... .whl/pNN of at most SIZE each, with stage.sh's device-stage.sh and the new part count,
# so the staging recipe is unchanged (one call per part, in order):
#
#   bash benchmarks/resplit_stage.sh [SIZE]      # SIZE in bytes; default: 64 MiB − the tracked tree − 8 MB
#
# The default leaves 8 MB beside a part for what a call carries with it (the last call's .gpu data, the
# tar headers); the tracked tree grows with every lease's results, so re-split when a call is refused.
#
# The parts' names keep stage.sh's order (site.tar.xz.partNN, model.whl.partNN), which is what
# device-stage.sh concatenates by; the check below compares checksums before the old parts go.
set -euo pipefail
root="$(git rev-parse --show-toplevel)"; whl="$root/.whl"
tracked=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 cat) | wc -c)
size=${1:-$((67108864 - tracked - 8000000))}
ls -d "$whl"/p[0-9][0-9] >/dev/null 2>&1 || { echo "no $whl/pNN: run ../shared/gpu/stage.sh first" >&2; exit 2; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
mkdir -p "$work/split"
cp "$(ls "$whl"/p[0-9][0-9]/device-stage.sh | head -1)" "$work/device-stage.sh"
for kind in site.tar.xz model.whl; do
  parts=$(ls "$whl"/p[0-9][0-9]/"$kind".part* 2>/dev/null) || true  # ls sorts: p01/…part00, p01/…part01, …
  [ -n "$parts" ] || continue
  # shellcheck disable=SC2086
  cat $parts > "$work/$kind"
  split -b "$size" -d -a 2 "$work/$kind" "$work/split/$kind.part"
  [ "$(cat "$work/split/$kind".part* | sha256sum)" = "$(sha256sum < "$work/$kind")" ]
  rm "$work/$kind"
done
rm -rf "$whl"/p[0-9][0-9]
n=0; total=$(ls "$work/split" | wc -l)
for f in $(ls "$work/split"); do
  n=$((n+1)); d="$whl/p$(printf %02d $n)"; mkdir -p "$d"
  mv "$work/split/$f" "$d/"; cp "$work/device-stage.sh" "$d/"; echo "$total" > "$d/PARTS"
done
echo "wrote $total parts of at most $size bytes: $whl/p01 ... $whl/p$(printf %02d $total)"
