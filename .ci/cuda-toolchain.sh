# Source this file: installs (once) and activates the CUDA 13.0 compiler from
# NVIDIA's PyPI wheels, so that `--features cuda` builds on a machine with no
# CUDA toolkit and no GPU. The versions are pinned together: a newer
# nvidia-nvvm emits PTX that this ptxas cannot read.
#
#   source .ci/cuda-toolchain.sh && cargo check --features cuda
#
# Override the install place with HEARTH_CUDA_HOME.
HEARTH_CUDA_VERSION="13.0"
HEARTH_CUDA_HOME="${HEARTH_CUDA_HOME:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/hearth/cuda-$HEARTH_CUDA_VERSION}"
if [ ! -x "$HEARTH_CUDA_HOME/nvidia/cu13/bin/nvcc" ]; then
    echo "installing the CUDA $HEARTH_CUDA_VERSION compiler into $HEARTH_CUDA_HOME" >&2
    rm -rf "$HEARTH_CUDA_HOME"
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
        --target "$HEARTH_CUDA_HOME" \
        "nvidia-cuda-nvcc==$HEARTH_CUDA_VERSION.*" \
        "nvidia-nvvm==$HEARTH_CUDA_VERSION.*" \
        "nvidia-cuda-crt==$HEARTH_CUDA_VERSION.*" \
        "nvidia-cuda-runtime==$HEARTH_CUDA_VERSION.*" \
        "nvidia-cuda-cccl==$HEARTH_CUDA_VERSION.*" || return 1
fi
export CUDA_ROOT="$HEARTH_CUDA_HOME/nvidia/cu13"
export CUDA_PATH="$CUDA_ROOT"
export PATH="$CUDA_ROOT/bin:$PATH"
# Hopper (H100/H200) unless told otherwise.
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
# candle-kernels' build script (cudaforge) compiles its .cu files on half the cores by default:
# one nvcc at a time on a 2-core machine, 16 of CI's minutes. Every core instead.
export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"
