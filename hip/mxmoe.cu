// mxmoe.cu: every HIP kernel of the mxmoe HIP backend, one source for NVIDIA (clang -x cuda ->
// PTX, run through the CUDA driver) and AMD (clang -x hip -> gfx942 / gfx950 code objects). A
// port of the WGSL kernels (shaders/*.wgsl), which are bit-exact against the CPU oracle; the
// host side is src/backend/hip/. Format, mode, scoring and activation ids come from the
// generated hip/mx_formats.h, target primitives from hip/mx_compat.h, matrix-core fragments from
// hip/mx_fragment.h.
//
// One translation unit on purpose, so that each target is one clang invocation and one code
// object (build.rs) and every kernel shares the inlined helpers. The kernels live in headers by
// op family, included below in this order (each uses what the ones before it define):
//
//   quant.h           mx_quantize, mx_dequantize, mx_qdq, mx_qdq_lanes   shaders/quant.wgsl
//   route.h           mx_route{,_v2,_v3,_v4}        shaders/route.wgsl + exact_math.wgsl
//   moe_common.h      MoeParams, activate, intermediate_qdq        shaders/moe_common.wgsl
//   gemv_epilogue.h   gemv1's epilogue (also in hip/test/gemv_mma_emu.cpp)
//   lists.h           moe_lists*, moe_route_lists* v1 .. v5           shaders/moe_lists.wgsl
//   route_warp.h      v6, routing by warps: moe_route_lists_w2*, mx_route_w* (also in
//                     hip/test/route_emu.cpp)
//   route_lists_w3.h  v6: moe_route_lists_w3_<NQ> (a few tokens, one block)
//   moe_tile.h        load_tile, weight_row, code_of, GEMM_ARGS (every GEMV and GEMM)
//   gemv.h            moe_gemv{1,2}_cb{4,6,8}, _v2, _v2c, _v3 (decode)  shaders/moe_gemv.wgsl
//   gemv_mma.h        moe_gemv{1,2}_mma* (NVIDIA matrix cores; MXMOE_HIP_GEMV=mma)
//   gemm_v1.h         mx_to_bf16, moe_gemm{1,2}[_split]_cb{4,6,8}        shaders/moe_gemm.wgsl
//                     on matrix cores (bf16 operands: every MX weight and QDQ'd activation is
//                     exact in bf16; unquantized activations are split hi + lo)
//   gemm_v2.h         moe_gemm{1,2}_v2_* (NVIDIA; MXMOE_HIP_GEMM=v2)
//   gemm_mma.h        moe_gemm{1,2}_mma_* (NVIDIA swap-AB), mx_to_bf16_p8, mx_nv4_repack
//   gemm_wgmma.h      moe_gemm{1,2}_mma_*_wg_cb4 (the same on wgmma.mma_async, sm_90a only)
//   p8_fused.h        mx_qdq_lanes_p8, mx_route_wx_*, moe_route_lists_w{2,3}x_* (NVIDIA)
//   gemm_mx.h         moe_gemm{1,2}_mx_<w>_<a> (gfx950: v_mfma_scale_f32_16x16x128_f8f6f4)
//   combine.h         moe_combine                                    shaders/moe_combine.wgsl
#include "mx_common.h"
#include "exact_math.h"
#include "mx_fragment.h"

typedef unsigned char u8;
typedef u32 uint4v __attribute__((ext_vector_type(4)));
typedef float float4v __attribute__((ext_vector_type(4)));

#include "quant.h"
#include "route.h"
#include "moe_common.h"
#include "gemv_epilogue.h"  // gemv1_finish, shared with gemv_mma.h and its CPU emulation
#include "lists.h"
#include "route_warp.h"  // MXMOE_HIP_ROUTE=v6: routing by warps (one warp per token, redux)
#include "route_lists_w3.h"
#include "moe_tile.h"
#include "gemv.h"
#include "gemv_mma.h"  // the matrix-core GEMV (NVIDIA; MXMOE_HIP_GEMV=mma)
#include "gemm_v1.h"
#include "gemm_v2.h"
#include "gemm_mma.h"  // the swap-AB GEMM (NVIDIA; MXMOE_HIP_GEMM=mma)
#include "gemm_wgmma.h"  // the same on wgmma (sm_90a; MXMOE_HIP_MMA_VARIANT=wg)
#include "p8_fused.h"
#include "gemm_mx.h"
#include "combine.h"
