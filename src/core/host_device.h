// KS_HOST_DEVICE marks functions that the CUDA kernels and the host code share (the Philox
// generator, the sampler's row rules), so both sides compute the same thing from one source.
#pragma once

#ifndef KS_HOST_DEVICE
#ifdef __CUDACC__
#define KS_HOST_DEVICE __host__ __device__
#else
#define KS_HOST_DEVICE
#endif
#endif
