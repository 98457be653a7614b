// quant.wgsl: quantize / dequantize / QDQ of row-major f32 data in 32-element blocks.
// One workgroup = 8 blocks x 32 lanes (one lane per element: coalesced loads and stores);
// the block max is a workgroup atomicMax on |x| bits (order-independent, exact).
// FMT / MODE: the MxFormat (FMT_*) and ScaleMode (SCALE_*) ids, fixed per pipeline.

override FMT: u32 = FMT_MXFP4;
override MODE: u32 = SCALE_EVEN;

struct QuantParams {
    n_blocks: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> qp: QuantParams;
@group(0) @binding(1) var<storage, read> q_src: array<u32>;
@group(0) @binding(2) var<storage, read> q_src2: array<u32>;
@group(0) @binding(3) var<storage, read_write> q_dst: array<u32>;
@group(0) @binding(4) var<storage, read_write> q_dst2: array<u32>;

var<workgroup> q_amax: array<atomic<u32>, 8>;
var<workgroup> q_codes: array<u32, 256>;
var<workgroup> q_bytes: array<u32, 8>;

fn q_wg_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// The block's scale byte from the shared amax (every lane computes it; cheap and uniform).
fn q_block_max(lid: u32, v: u32) -> u32 {
    let blk = lid / 32u;
    if (lid & 31u) == 0u {
        atomicStore(&q_amax[blk], 0u);
    }
    workgroupBarrier();
    atomicMax(&q_amax[blk], v & 0x7FFFFFFFu);
    workgroupBarrier();
    return atomicLoad(&q_amax[blk]);
}

// q_src = x bits; q_dst = packed codes (code_bits words per block); q_dst2 = scale bytes, 4 per
// word.
@compute @workgroup_size(256)
fn quantize(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let b0 = q_wg_index(wid, nwg) * 8u;
    let blk = lid / 32u;
    let b = b0 + blk;
    let lane = lid & 31u;
    var v = 0u;
    if b < qp.n_blocks {
        v = q_src[b * 32u + lane];
    }
    let amax = q_block_max(lid, v);
    let byte = mx_scale_byte(FMT, MODE, amax);
    var code = 0u;
    if byte != 255u {
        code = mx_encode(FMT, v, i32(byte) - 127);
    }
    q_codes[lid] = code;
    if lane == 0u {
        q_bytes[blk] = byte;
    }
    workgroupBarrier();
    let cb = mx_spec(FMT).code_bits;
    if lane < cb && b < qp.n_blocks {
        let j0 = (32u * lane) / cb;
        let j1 = min((32u * lane + 31u) / cb, 31u);
        var word = 0u;
        for (var j = j0; j <= j1; j = j + 1u) {
            word = word | mx_pack_shift(j, lane, cb, q_codes[blk * 32u + j]);
        }
        q_dst[b * cb + lane] = word;
    }
    if lid < 2u {
        let sw = b0 / 4u + lid;
        if sw * 4u < qp.n_blocks {
            var word = 0u;
            for (var i = 0u; i < 4u; i = i + 1u) {
                if sw * 4u + i < qp.n_blocks {
                    word = word | (q_bytes[lid * 4u + i] << (8u * i));
                }
            }
            q_dst2[sw] = word;
        }
    }
}

// q_src = packed codes, q_src2 = scale bytes; q_dst = f32 bits.
@compute @workgroup_size(256)
fn dequantize(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = q_wg_index(wid, nwg) * 8u + lid / 32u;
    if b >= qp.n_blocks {
        return;
    }
    let lane = lid & 31u;
    let cb = mx_spec(FMT).code_bits;
    let bp = lane * cb;
    let w = b * cb + bp / 32u;
    let off = bp & 31u;
    var w1 = 0u;
    if off + cb > 32u {
        w1 = q_src[w + 1u];
    }
    let code = mx_code_at(q_src[w], w1, off, cb);
    let byte = (q_src2[b / 4u] >> (8u * (b & 3u))) & 0xFFu;
    q_dst[b * 32u + lane] = mx_dequant_bits(FMT, code, byte);
}

// q_src = x bits; q_dst = dequant(quant(x)) bits.
@compute @workgroup_size(256)
fn qdq(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
       @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = q_wg_index(wid, nwg) * 8u + lid / 32u;
    let lane = lid & 31u;
    var v = 0u;
    if b < qp.n_blocks {
        v = q_src[b * 32u + lane];
    }
    let amax = q_block_max(lid, v);
    if b < qp.n_blocks {
        let byte = mx_scale_byte(FMT, MODE, amax);
        var code = 0u;
        if byte != 255u {
            code = mx_encode(FMT, v, i32(byte) - 127);
        }
        q_dst[b * 32u + lane] = mx_dequant_bits(FMT, code, byte);
    }
}
