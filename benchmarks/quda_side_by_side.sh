#!/bin/bash
# Our dslash and solvers beside QUDA's dslash_test and invert_test on one GPU machine, as the
# tables of docs/performance.md were measured. Run from the checkout root on the GPU machine,
# after the setup of ../shared/device (its setup.sh), with results written under $OUT:
#
#   benchmarks/quda_side_by_side.sh build             QUDA in the background (about 5 minutes, 16 cores:
#                                                     not beside a timing), from $QUDA_SRC/build.sh
#   benchmarks/quda_side_by_side.sh tune L [L ...]    our dslash tuned at lattices L (e.g. 32,32,32,32)
#                                                     into $DB (a copy of tune.db.example made once)
#   benchmarks/quda_side_by_side.sh dslash            QUDA's dslash_test for the 9 (precision, reconstruct)
#                                                     at 32^4 (waits for the build), then ours re-timed
#                                                     from $DB with 100 launches a batch
#   benchmarks/quda_side_by_side.sh solvers           double-half and double-single CG at 32^4, kappa 0.2:
#                                                     ours (benchmarks/solvers.py) and invert_test
#   benchmarks/quda_side_by_side.sh build-mpi         QUDA built with MPI (QUDA_MPI=ON, against the mpich
#                                                     wheel's mpicc/mpicxx, found beside python3) instead;
#                                                     about 8 minutes on 32 cores
#   benchmarks/quda_side_by_side.sh grid [N] [PART]   on N GPUs (default 2), a t cut at 32^3 x 64 (32^4 a
#                                                     GPU): QUDA's dslash_test and its double-single and
#                                                     double-half CG (invert_test) with --gridsize, and
#                                                     on one GPU at 32^4 and 32^3 x 64; then ours the
#                                                     same way (distributed_dslash.py, distributed_solver.py
#                                                     with the three CG recurrences, double-single and
#                                                     double-half). Needs build-mpi. PART: quda, ours or
#                                                     both (default): each part about 5 minutes
#
# QUDA_SRC: the folder of QUDA's build script (default .gpu/quda: `.ci/gpu-prepare --with-quda`,
# which also lets QUDA_RECONSTRUCT=6 build 18- and 12-parameter links only, about 7 minutes);
# its binaries land in /tmp/qb/tests. DB: default /tmp/side-by-side/tune.db.
set -u
cmd=${1:?"give build, build-mpi, tune, dslash, solvers or grid"}; shift
OUT=${OUT:?"set OUT to a folder for the results"}
QUDA_SRC=${QUDA_SRC:-.gpu/quda}
DB=${DB:-/tmp/side-by-side/tune.db}
QUDA_BIN=/tmp/qb/tests

ensure_db() { mkdir -p "$(dirname "$DB")" /tmp/qres; [ -f "$DB" ] || cp tune.db.example "$DB"; }

wait_for_quda() {
  for _ in $(seq 1 90); do grep -q "QUDA built" /tmp/qb.out 2>/dev/null && return 0; sleep 5; done
  echo "QUDA is not built (see /tmp/qb.out)"; exit 1
}

case $cmd in
  build)
    [ -x $QUDA_BIN/dslash_test ] || (setsid nohup bash "$QUDA_SRC/build.sh" > /tmp/qb.out 2>&1 &) ;;
  tune)
    ensure_db
    for L in "$@"; do
      name=${L//,/x}
      python benchmarks/wilson_dslash.py --lattices "$L" --db "$DB" --json "$OUT/ours_tune_$name.json" \
        > "$OUT/ours_tune_$name.log" 2>&1
      tail -12 "$OUT/ours_tune_$name.log"
    done ;;
  dslash)
    ensure_db; wait_for_quda
    for P in half single double; do for R in 18 12 8; do
      QUDA_RESOURCE_PATH=/tmp/qres $QUDA_BIN/dslash_test --dslash-type wilson --prec $P --recon $R \
        --dim 32 32 32 32 --niter 1000 --verify false --gtest_filter='*benchmark*' > "$OUT/quda_${P}_$R.log" 2>&1
      echo "QUDA $P $R: $(grep -E 'GFLOPS' "$OUT/quda_${P}_$R.log" | tail -1)"
    done; done
    python benchmarks/wilson_dslash.py --lattices 32,32,32,32 --db "$DB" --repeats 100 \
      --json "$OUT/ours_after_quda.json" > "$OUT/ours_after_quda.log" 2>&1
    tail -12 "$OUT/ours_after_quda.log" ;;
  solvers)
    ensure_db; wait_for_quda
    AUTOTUNE_DB="$DB" python benchmarks/solvers.py --kappas 0.2 --json "$OUT/solvers.json" > "$OUT/solvers.log" 2>&1
    grep -E '"kappa"' "$OUT/solvers.log"
    for S in half single; do
      QUDA_RESOURCE_PATH=/tmp/qres $QUDA_BIN/invert_test --dslash-type wilson --inv-type cg --solve-type normop-pc \
        --prec double --prec-sloppy $S --recon 12 --recon-sloppy 12 --dim 32 32 32 32 --kappa 0.2 --tol 1e-10 \
        --niter 20000 --nsrc 4 > "$OUT/invert_$S.log" 2>&1
      echo "QUDA double-$S (the last source is the one compared): $(grep -E 'Done:' "$OUT/invert_$S.log" | tail -1)"
    done ;;
  build-mpi)
    # the mpich wheel puts its compiler wrappers beside the interpreter, which may not be on PATH
    PATH="$(dirname "$(python3 -c 'import sys; print(sys.executable)')"):$PATH"
    command -v mpicxx >/dev/null || { echo "mpicxx is not on PATH (the mpich wheel's bin)"; exit 2; }
    [ -x $QUDA_BIN/dslash_test ] && grep -q "QUDA_MPI:BOOL=ON" /tmp/qb/CMakeCache.txt 2>/dev/null || \
      (QUDA_MPI=ON CC=mpicc CXX=mpicxx setsid nohup bash "$QUDA_SRC/build.sh" > /tmp/qb.out 2>&1 &) ;;
  grid)
    ensure_db; wait_for_quda
    N=${1:-2}
    PART=${2:-both}
    M=$(python -c "import sys; sys.path.insert(0, 'tests'); from processes import mpiexec; print(mpiexec())")
    # QUDA: --dim is each rank's block; the t cut over N ranks gives 32^3 x (32 N) in all
    [ "$PART" = ours ] || for run in "1 32 1" "1 $((32 * N)) 1" "$N 32 $N"; do
      set -- $run
      QUDA_RESOURCE_PATH=/tmp/qres $M -n "$1" $QUDA_BIN/dslash_test --dslash-type wilson --prec single \
        --recon 12 --dim 32 32 32 "$2" --gridsize 1 1 1 "$3" --niter 1000 --verify false \
        --gtest_filter='*benchmark*' > "$OUT/quda_grid_n$1_t$2.log" 2>&1
      echo "QUDA dslash, $1 rank(s), 32^3 x $2 each: $(grep -E 'GFLOPS' "$OUT/quda_grid_n$1_t$2.log" | tail -1)"
      for S in single half; do
        QUDA_RESOURCE_PATH=/tmp/qres $M -n "$1" $QUDA_BIN/invert_test --dslash-type wilson --inv-type cg \
          --solve-type normop-pc --prec double --prec-sloppy $S --recon 12 --recon-sloppy 12 \
          --dim 32 32 32 "$2" --gridsize 1 1 1 "$3" --kappa 0.2 --tol 1e-10 --niter 20000 --nsrc 2 \
          > "$OUT/quda_invert_${S}_n$1_t$2.log" 2>&1
        echo "QUDA double-$S CG, $1 rank(s), 32^3 x $2 each: $(grep -E 'Done:' "$OUT/quda_invert_${S}_n$1_t$2.log" | tail -1)"
      done
    done
    [ "$PART" = quda ] && exit 0
    cd benchmarks
    for run in "1 32 1" "1 $((32 * N)) 1" "$N $((32 * N)) $N"; do
      set -- $run
      AUTOTUNE_DB="$DB" $M -n "$1" python distributed_dslash.py --dims 32 32 32 "$2" --grid 1 1 1 "$3" \
        --policy overlap overlap_in_order fused --rounds 3 --json "$OUT/ours_grid_n$1_t$2.json" \
        > "$OUT/ours_grid_n$1_t$2.log" 2>&1
      echo "ours, $1 rank(s), 32^3 x $2: $(grep -E '^dslash by' "$OUT/ours_grid_n$1_t$2.log")"
    done
    for run in "1 1" "$N $N"; do
      set -- $run
      AUTOTUNE_DB="$DB" $M -n "$1" python distributed_solver.py --dims 32 32 32 $((32 * N)) \
        --grid 1 1 1 "$2" --kappa 0.2 --recurrence classic single_reduction pipelined --repeat 3 \
        --sloppy single half --json "$OUT/ours_cg_n$1.json" > "$OUT/ours_cg_n$1.log" 2>&1
      grep -E "rank\(s\)" "$OUT/ours_cg_n$1.log"
    done ;;
  *) echo "unknown command $cmd: give build, build-mpi, tune, dslash, solvers or grid"; exit 2 ;;
esac
