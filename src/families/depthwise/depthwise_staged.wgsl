// The depthwise family's staged kernel, for depthwise convolutions of multiplier 1 on NCHW
// tensors: each workgroup copies one tile of P consecutive planes (whole image planes where
// they are small, else a band of rows and columns of one plane) with its halo from global
// memory into workgroup memory, padding written out as zeros, then computes the tile's
// outputs from there. The copy is a flat loop over the tile with one load per input value
// and no branch (out-of-image positions load a valid address and keep zero); the outputs
// read their rows from workgroup memory with no bounds test. Consecutive planes of one
// image and of consecutive images are contiguous in NCHW, so a tile of whole planes is one
// contiguous run of the input and of the output.
//
// Padded taps are explicit zeros that are multiplied, like every other family.
// CPU twin: src/families/depthwise/staged.rs (`staged_twin`), against src/reference.rs.

#import params
#import precision
#import tensors
#import config

@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;

const TAPS: u32 = KH * KW;
// Staged values per plane, and in the whole tile.
const PLANE: u32 = SROWS * SCOLS;
const STAGED: u32 = P * PLANE;
// Output blocks (VX neighbouring columns of one row) of a tile.
const BLOCKS: u32 = P * TY * XB_T;

var<workgroup> staged: array<f32, STAGED>;
var<workgroup> taps: array<f32, P * TAPS>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // The grid may be folded into two dimensions (65 535 workgroups per dimension). Column
    // tiles fastest, then row tiles, then groups of P planes.
    let tile = wid.x + wid.y * nwg.x;
    let tx = tile % TILES_X;
    let ty = (tile / TILES_X) % TILES_Y;
    let q0 = tile / (TILES_X * TILES_Y) * P;
    let planes = p.batch * p.c_out;
    let oy0 = ty * TY;
    let ox0 = tx * XB_T * VX;
    let iy0 = i32(oy0 * STRIDE_H) - i32(p.pad_top);
    let ix0 = i32(ox0 * STRIDE_W) - i32(p.pad_left);

    for (var e = lid; e < STAGED; e += WG) {
        let pl = e / PLANE;
        let r = (e % PLANE) / SCOLS;
        let j = e % SCOLS;
        let q = q0 + pl;
        let iy = iy0 + i32(r);
        let ix = ix0 + i32(j);
        let inside = q < planes && iy >= 0 && iy < i32(H) && ix >= 0 && ix < i32(W);
        let at = select(0u, (q * H + u32(iy)) * W + u32(ix), inside);
        // The padding's zero is selected before the operand's range check sees the value.
        staged[e] = input_operand(select(0.0, input_value(p.in_offset + at), inside));
    }
    for (var e = lid; e < P * TAPS; e += WG) {
        // Weights are [C_out][KH·KW]; a plane past the chunk's end reads a valid channel.
        let c = min(q0 + e / TAPS, planes - 1u) % p.c_out;
        taps[e] = weight[c * TAPS + e % TAPS];
    }
    workgroupBarrier();

    for (var b = lid; b < BLOCKS; b += WG) {
        let pl = b / (TY * XB_T);
        let y = (b / XB_T) % TY;
        let xb = b % XB_T;
        var acc: array<f32, VX>;
        for (var ky = 0u; ky < KH; ky++) {
            let row = (pl * SROWS + y * STRIDE_H + ky * DIL_H) * SCOLS + xb * VX * STRIDE_W;
            var seg: array<f32, SPAN_X>;
            for (var j = 0u; j < SPAN_X; j++) {
                seg[j] = staged[row + j];
            }
            for (var kx = 0u; kx < KW; kx++) {
                let wv = taps[pl * TAPS + ky * KW + kx];
                for (var x = 0u; x < VX; x++) {
                    acc[x] = fma(seg[x * STRIDE_W + kx * DIL_W], wv, acc[x]);
                }
            }
        }
        let q = q0 + pl;
        let oy = oy0 + y;
        let ox = ox0 + xb * VX;
        if (q < planes && oy < OH) {
            let bv = bias[q % p.c_out];
            let out_row = p.out_offset + (q * OH + oy) * OW + ox;
            for (var x = 0u; x < VX; x++) {
                if (ox + x < OW) {
                    store_output(out_row + x, activate(acc[x] + bv));
                }
            }
        }
    }
    report_range();
}
