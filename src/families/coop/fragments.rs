//! What the cooperative-matrix families share: how a block's 16×16 fragments split over the
//! warps, and the per-fragment statements (WGSL cannot index an array of cooperative
//! matrices, so each fragment's accumulator, loads and multiply-adds are written out).

use crate::error::Error;

/// The most square split of `frags_m × frags_n` 16×16 fragments over `warps` warps, at most
/// `max_fragments` per warp: `(warps_m, warps_n, fm, fn)`, or why not (for `config`'s
/// refusal).
pub(crate) fn fragment_layout(
    frags_m: u32,
    frags_n: u32,
    warps: u32,
    max_fragments: u32,
    config: &str,
) -> Result<(u32, u32, u32, u32), Error> {
    let mut best: Option<(u32, u32, u32, u32)> = None;
    for wn in (1..=warps).filter(|d| warps.is_multiple_of(*d)) {
        let wm = warps / wn;
        if !frags_n.is_multiple_of(wn) || !frags_m.is_multiple_of(wm) {
            continue;
        }
        let (fm, fn_) = (frags_m / wm, frags_n / wn);
        if fm * fn_ > max_fragments {
            continue;
        }
        if best.is_none_or(|(_, _, bm, bn)| fm.abs_diff(fn_) < bm.abs_diff(bn)) {
            best = Some((wm, wn, fm, fn_));
        }
    }
    best.ok_or_else(|| Error::KernelRefused {
        kernel: config.to_string(),
        reason: format!(
            "{warps} warps cannot split {frags_m}x{frags_n} 16x16 fragments into at most {max_fragments} per warp"
        ),
    })
}

/// What differs between the cooperative-matrix kernels' per-fragment statements.
pub(crate) struct FragmentCode<'a> {
    /// The load of A fragment i and of B fragment j from a staged tile (right-hand sides).
    pub a_load: &'a dyn Fn(u32, &str) -> String,
    /// See `a_load`.
    pub b_load: &'a dyn Fn(u32, &str) -> String,
    /// Operands staged as high and low f16 halves (the f16x3 kernel): each fragment is
    /// loaded from both tiles, and each step forms three products.
    pub split: bool,
    /// Per-warp statements after the accumulators are zeroed, for fragment row i.
    pub init_row: &'a dyn Fn(u32) -> String,
    /// The store of accumulator (i, j).
    pub store: &'a dyn Fn(u32, u32) -> String,
}

/// The generated modules a cooperative kernel imports: `fragment_decls` (one accumulator
/// per fragment (i, j) of the warp's FM×FN), `fragment_init` (zeroed), `fragment_mma` (per
/// multiply step FM A and FN B loads and FM·FN multiply-adds) and `fragment_store`.
pub(crate) fn fragment_modules(fm: u32, fn_: u32, code: &FragmentCode) -> Vec<(&'static str, String)> {
    let frags: Vec<(u32, u32)> = (0..fm).flat_map(|i| (0..fn_).map(move |j| (i, j))).collect();
    let decls: String =
        frags.iter().map(|(i, j)| format!("var<private> acc_{i}_{j}: coop_mat16x16<f32, C>;\n")).collect();
    let mut init: String = frags.iter().map(|(i, j)| format!("acc_{i}_{j} = coop_mat16x16<f32, C>();\n")).collect();
    (0..fm).for_each(|i| init.push_str(&(code.init_row)(i)));
    let mut mma = String::new();
    for i in 0..fm {
        mma.push_str(&format!("let a_{i} = {};\n", (code.a_load)(i, "a_tile")));
        if code.split {
            mma.push_str(&format!("let al_{i} = {};\n", (code.a_load)(i, "a_lo_tile")));
        }
    }
    for j in 0..fn_ {
        mma.push_str(&format!("let b_{j} = {};\n", (code.b_load)(j, "b_tile")));
        if code.split {
            mma.push_str(&format!("let bl_{j} = {};\n", (code.b_load)(j, "b_lo_tile")));
        }
    }
    for (i, j) in &frags {
        if code.split {
            // The step's three products go into a fresh partial, small terms first, which is
            // then added to the accumulator in f32: the matrix units' own accumulation is
            // coarser than an f32 add (f16-exact operands: relative L2 4.7e-7 against 3.3e-7
            // for f32 FMAs on the H100), and three of its roundings per step against the
            // running sum would triple that error.
            mma.push_str(&format!(
                "let cross_{i}_{j} = coopMultiplyAdd(a_{i}, bl_{j}, coopMultiplyAdd(al_{i}, b_{j}, coop_mat16x16<f32, C>()));\n\
                 acc_{i}_{j} = acc_{i}_{j} + coopMultiplyAdd(a_{i}, b_{j}, LO_WEIGHT * cross_{i}_{j});\n"
            ));
        } else {
            mma.push_str(&format!("acc_{i}_{j} = coopMultiplyAdd(a_{i}, b_{j}, acc_{i}_{j});\n"));
        }
    }
    let store: String = frags.iter().map(|&(i, j)| (code.store)(i, j)).collect();
    vec![("fragment_decls", decls), ("fragment_init", init), ("fragment_mma", mma), ("fragment_store", store)]
}
