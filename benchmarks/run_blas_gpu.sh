#!/usr/bin/env bash
# The BLAS benchmarks of the DPIA paper's §7 on the GPU machine (see ../../shared/GPU.md), from the
# repository root: bash benchmarks/run_blas_gpu.sh.  Installs the wheels of .whl/ into /tmp/site,
# registers the NVIDIA OpenCL ICD (and the system's PoCL for the CPU run), runs fsmooth against
# cuBLAS, then against numpy on PoCL's CPU device if one builds kernels there.  Results go to
# $OUT (default benchmarks/results): blas_gpu.json/.png, blas_cpu.json/.png.
set -u
PY="${PYTHON:-python3}"
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT" /tmp/icd
"$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 2
echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
cp /etc/OpenCL/vendors/*.icd /tmp/icd/ 2>/dev/null
export OCL_ICD_VENDORS=/tmp/icd PYTHONPATH="/tmp/site:$PWD" FSMOOTH_CACHE_DIR=/tmp/fsmooth-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>/dev/null
"$PY" -m benchmarks.blas --device gpu --out "$OUT"; gpu=$?
# The CPU run must not cost the GPU results: bounded, and a missing PoCL is only reported (exit 3).
timeout 200 "$PY" -m benchmarks.blas --device cpu --out "$OUT"; cpu=$?
echo "blas: gpu run exit $gpu, cpu run exit $cpu"
exit $gpu
