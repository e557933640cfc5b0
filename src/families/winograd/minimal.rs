//! Winograd's minimal filtering algorithms F(m×m, r×r) the family runs, as their three
//! matrices — `Bᵀ` (n×n, the input transform), `G` (n×r, the weights'), `Aᵀ` (m×n, the
//! output's), n = m + r − 1, so that for a tile `d` of n×n inputs and a kernel `g` of r×r
//! taps the m×m outputs of the (cross-)correlation are `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` — and
//! the WGSL of the two transforms the passes apply, generated from them.
//!
//! The algorithms are Toom–Cook's at the points 0, ±1 (n = 4), 0, ±1, ±2 (n = 6) and 0, ±1,
//! ±2, ±½ (n = 8), each with the point at infinity: `Aᵀ` holds the points' powers, `G` their
//! Lagrange weights (row j: p_jᵏ / Π_{l≠j}(p_j − p_l)), and `Bᵀ` the coefficients of the
//! products of the other points' factors — small integers for n ≤ 6, multiples of ¼ for
//! n = 8, each exact in f32 — so that the input transform adds, subtracts and multiplies by
//! short constants only. F(4×4, 3×3) and F(2×2, 5×5) share n = 6 and `Bᵀ`, F(4×4, 5×5) and
//! F(6×6, 3×3) n = 8 and theirs.

/// One algorithm F(m×m, r×r).
#[derive(Debug, PartialEq)]
pub(crate) struct Minimal {
    /// Outputs per tile side (m).
    pub out: u32,
    /// The kernel's side (r).
    pub kernel: u32,
    /// The most input channels at which its f32 result kept [`crate::Precision::F32`]'s
    /// contract (1e-5 relative L2 error) on random inputs: its error grows with the sum's
    /// length, from its transforms' larger coefficients.
    pub f32_channels: u32,
    /// `Bᵀ`, n×n, row-major.
    bt: &'static [f64],
    /// `G`, n×r, row-major.
    g: &'static [f64],
    /// `Aᵀ`, m×n, row-major.
    at: &'static [f64],
}

/// `Bᵀ` at the points 0, 1, −1 and infinity.
const BT4: [f64; 16] = [
    1.0, 0.0, -1.0, 0.0, //
    0.0, 1.0, 1.0, 0.0, //
    0.0, -1.0, 1.0, 0.0, //
    0.0, 1.0, 0.0, -1.0,
];

/// `Bᵀ` at the points 0, 1, −1, 2, −2 and infinity.
const BT6: [f64; 36] = [
    4.0, 0.0, -5.0, 0.0, 1.0, 0.0, //
    0.0, -4.0, -4.0, 1.0, 1.0, 0.0, //
    0.0, 4.0, -4.0, -1.0, 1.0, 0.0, //
    0.0, -2.0, -1.0, 2.0, 1.0, 0.0, //
    0.0, 2.0, -1.0, -2.0, 1.0, 0.0, //
    0.0, 4.0, 0.0, -5.0, 0.0, 1.0,
];

/// `Bᵀ` at the points 0, 1, −1, 2, −2, ½, −½ and infinity.
const BT8: [f64; 64] = [
    -1.0, 0.0, 5.25, 0.0, -5.25, 0.0, 1.0, 0.0, //
    0.0, 1.0, 1.0, -4.25, -4.25, 1.0, 1.0, 0.0, //
    0.0, -1.0, 1.0, 4.25, -4.25, -1.0, 1.0, 0.0, //
    0.0, 0.5, 0.25, -2.5, -1.25, 2.0, 1.0, 0.0, //
    0.0, -0.5, 0.25, 2.5, -1.25, -2.0, 1.0, 0.0, //
    0.0, 2.0, 4.0, -2.5, -5.0, 0.5, 1.0, 0.0, //
    0.0, -2.0, 4.0, 2.5, -5.0, -0.5, 1.0, 0.0, //
    0.0, -1.0, 0.0, 5.25, 0.0, -5.25, 0.0, 1.0,
];

/// `G` of F(4×4, 3×3) (rows: the points 0, 1, −1, 2, −2, infinity).
#[rustfmt::skip]
const G_F4X4_3X3: [f64; 18] = [
    1.0 / 4.0, 0.0, 0.0,
    -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0,
    -1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0,
    1.0 / 24.0, 2.0 / 24.0, 4.0 / 24.0,
    1.0 / 24.0, -2.0 / 24.0, 4.0 / 24.0,
    0.0, 0.0, 1.0,
];

/// `G` of F(2×2, 5×5) (rows as F(4×4, 3×3)'s).
#[rustfmt::skip]
const G_F2X2_5X5: [f64; 30] = [
    1.0 / 4.0, 0.0, 0.0, 0.0, 0.0,
    -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0,
    -1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0,
    1.0 / 24.0, 2.0 / 24.0, 4.0 / 24.0, 8.0 / 24.0, 16.0 / 24.0,
    1.0 / 24.0, -2.0 / 24.0, 4.0 / 24.0, -8.0 / 24.0, 16.0 / 24.0,
    0.0, 0.0, 0.0, 0.0, 1.0,
];

/// `G` of F(4×4, 5×5) (rows: the points 0, 1, −1, 2, −2, ½, −½, infinity).
#[rustfmt::skip]
const G_F4X4_5X5: [f64; 40] = [
    -1.0, 0.0, 0.0, 0.0, 0.0,
    -2.0 / 9.0, -2.0 / 9.0, -2.0 / 9.0, -2.0 / 9.0, -2.0 / 9.0,
    -2.0 / 9.0, 2.0 / 9.0, -2.0 / 9.0, 2.0 / 9.0, -2.0 / 9.0,
    1.0 / 90.0, 1.0 / 45.0, 2.0 / 45.0, 4.0 / 45.0, 8.0 / 45.0,
    1.0 / 90.0, -1.0 / 45.0, 2.0 / 45.0, -4.0 / 45.0, 8.0 / 45.0,
    32.0 / 45.0, 16.0 / 45.0, 8.0 / 45.0, 4.0 / 45.0, 2.0 / 45.0,
    32.0 / 45.0, -16.0 / 45.0, 8.0 / 45.0, -4.0 / 45.0, 2.0 / 45.0,
    0.0, 0.0, 0.0, 0.0, 1.0,
];

/// `G` of F(6×6, 3×3) (rows as F(4×4, 5×5)'s).
#[rustfmt::skip]
const G_F6X6_3X3: [f64; 24] = [
    -1.0, 0.0, 0.0,
    -2.0 / 9.0, -2.0 / 9.0, -2.0 / 9.0,
    -2.0 / 9.0, 2.0 / 9.0, -2.0 / 9.0,
    1.0 / 90.0, 1.0 / 45.0, 2.0 / 45.0,
    1.0 / 90.0, -1.0 / 45.0, 2.0 / 45.0,
    32.0 / 45.0, 16.0 / 45.0, 8.0 / 45.0,
    32.0 / 45.0, -16.0 / 45.0, 8.0 / 45.0,
    0.0, 0.0, 1.0,
];

/// F(2×2, 3×3): 16 products per 4 outputs (36 multiply-adds directly).
pub(crate) const F2X2_3X3: Minimal = Minimal {
    out: 2,
    kernel: 3,
    // 1.9e-6 at 4096 channels (lavapipe, 12×12 outputs, 16 channels, wgconv bench).
    f32_channels: u32::MAX,
    bt: &BT4,
    g: &[
        1.0, 0.0, 0.0, //
        0.5, 0.5, 0.5, //
        0.5, -0.5, 0.5, //
        0.0, 0.0, 1.0,
    ],
    at: &[
        1.0, 1.0, 1.0, 0.0, //
        0.0, 1.0, -1.0, -1.0,
    ],
};

/// F(4×4, 3×3): 36 products per 16 outputs (144 directly).
pub(crate) const F4X4_3X3: Minimal = Minimal {
    out: 4,
    kernel: 3,
    // 4.1e-6 at 512 channels, 6.7e-6 at 1024, 1.01e-5 at 2048 (lavapipe, as above; the twin,
    // summing in f32, 8.0e-6 at 1024 on zero-mean data); the H100 3.0–4.5e-6 on the
    // 256–512-channel layers of ResNet-50, VGG-16 and AlexNet. 512 keeps a margin of 2.
    f32_channels: 512,
    bt: &BT6,
    g: &G_F4X4_3X3,
    at: &[
        1.0, 1.0, 1.0, 1.0, 1.0, 0.0, //
        0.0, 1.0, -1.0, 2.0, -2.0, 0.0, //
        0.0, 1.0, 1.0, 4.0, 4.0, 0.0, //
        0.0, 1.0, -1.0, 8.0, -8.0, 1.0,
    ],
};

/// F(2×2, 5×5): 36 products per 4 outputs (100 directly).
pub(crate) const F2X2_5X5: Minimal = Minimal {
    out: 2,
    kernel: 5,
    // 5.4e-6 at 512 channels, 7.4e-6 at 1024, 1.03e-5 at 2048 (as above).
    f32_channels: 512,
    bt: &BT6,
    g: &G_F2X2_5X5,
    at: &[
        1.0, 1.0, 1.0, 1.0, 1.0, 0.0, //
        0.0, 1.0, -1.0, 2.0, -2.0, 1.0,
    ],
};

/// F(4×4, 5×5): 64 products per 16 outputs (400 directly).
pub(crate) const F4X4_5X5: Minimal = Minimal {
    out: 4,
    kernel: 5,
    // Its transforms' coefficients reach 5.25 (inputs) and 8 (outputs), and G's 32/45: an f32
    // simulation of the passes (random normal data, sums in channel order) gave 4.1e-6 at 96
    // channels, 4.4e-6 at 128, 6.0e-6 at 256 and 8.1e-6 at 512; 128 keeps a margin of 2.
    f32_channels: 128,
    bt: &BT8,
    g: &G_F4X4_5X5,
    at: &[
        1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, //
        0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 0.0, //
        0.0, 1.0, 1.0, 4.0, 4.0, 0.25, 0.25, 0.0, //
        0.0, 1.0, -1.0, 8.0, -8.0, 0.125, -0.125, 1.0,
    ],
};

/// F(6×6, 3×3): 64 products per 36 outputs (324 directly).
pub(crate) const F6X6_3X3: Minimal = Minimal {
    out: 6,
    kernel: 3,
    // Its output transform multiplies by up to 32: f32 simulations of the passes (as
    // F(4×4, 5×5)'s) gave 3.6e-6 at 64 channels, 4.7–5.5e-6 at 128 (two of them), 5.4e-6 at
    // 192 and 6.6e-6 at 256; lavapipe 3.4e-6 at 64 and 4.5e-6 at 128. 128 keeps a margin of
    // about 2.
    f32_channels: 128,
    bt: &BT8,
    g: &G_F6X6_3X3,
    at: &[
        1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, //
        0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 0.0, //
        0.0, 1.0, 1.0, 4.0, 4.0, 0.25, 0.25, 0.0, //
        0.0, 1.0, -1.0, 8.0, -8.0, 0.125, -0.125, 0.0, //
        0.0, 1.0, 1.0, 16.0, 16.0, 0.0625, 0.0625, 0.0, //
        0.0, 1.0, -1.0, 32.0, -32.0, 0.03125, -0.03125, 1.0,
    ],
};

/// Every algorithm, for the family's lookups and the tests.
pub(crate) const ALL: [&Minimal; 5] = [&F2X2_3X3, &F4X4_3X3, &F2X2_5X5, &F4X4_5X5, &F6X6_3X3];

/// The algorithm of `out` outputs per tile side for a square kernel of side `kernel`, if any.
pub(crate) fn of(out: u32, kernel: u32) -> Option<&'static Minimal> {
    ALL.into_iter().find(|a| a.out == out && a.kernel == kernel)
}

impl Minimal {
    /// The input tile's side, n = m + r − 1.
    pub(crate) const fn n(&self) -> u32 {
        self.out + self.kernel - 1
    }

    /// Components of a transformed tile (n²): the GEMMs it runs.
    pub(crate) const fn components(&self) -> u32 {
        self.n() * self.n()
    }

    /// How many times fewer multiply-adds than the direct sum: m²r² / n².
    pub(crate) fn multiply_add_saving(&self) -> f64 {
        (self.out * self.out * self.kernel * self.kernel) as f64 / self.components() as f64
    }

    /// The transformed input's and the products' size against the input's and the output's:
    /// n² / m².
    pub(crate) fn transform_growth(&self) -> f64 {
        self.components() as f64 / (self.out * self.out) as f64
    }

    /// The most a component of `V = Bᵀ d B` can reach against the patch's largest magnitude:
    /// the square of `Bᵀ`'s largest row sum of magnitudes (100 for n = 6, 225 for n = 8).
    #[cfg(test)]
    pub(crate) fn input_bound(&self) -> f64 {
        let n = self.n() as usize;
        let row = (0..n).map(|i| self.bt[i * n..][..n].iter().map(|v| v.abs()).sum::<f64>()).fold(0.0, f64::max);
        row * row
    }

    /// Its name, as messages write it: `F(4×4, 3×3)`.
    pub(crate) fn name(&self) -> String {
        format!("F({m}×{m}, {r}×{r})", m = self.out, r = self.kernel)
    }

    /// `U = G g Gᵀ` of one r×r kernel `g` (row-major), n×n row-major, in f64 (rounded to f32
    /// once, at the end).
    pub(crate) fn transform_kernel(&self, g: &[f32]) -> Vec<f32> {
        let (n, r) = (self.n() as usize, self.kernel as usize);
        // G g: n×r.
        let mut gg = vec![0.0f64; n * r];
        for i in 0..n {
            for j in 0..r {
                gg[i * r + j] = (0..r).map(|k| self.g[i * r + k] * g[k * r + j] as f64).sum();
            }
        }
        let mut u = vec![0.0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                u[i * n + j] = (0..r).map(|k| gg[i * r + k] * self.g[j * r + k]).sum::<f64>() as f32;
            }
        }
        u
    }

    /// `Bᵀ x` of one column or row of n values, in f32 in the order the WGSL computes it.
    #[cfg(test)]
    pub(crate) fn input_transform(&self, x: &[f32]) -> Vec<f32> {
        apply(self.bt, self.n() as usize, x)
    }

    /// `Aᵀ x` of one column or row of n values, in f32 in the order the WGSL computes it.
    #[cfg(test)]
    pub(crate) fn output_transform(&self, x: &[f32]) -> Vec<f32> {
        apply(self.at, self.out as usize, x)
    }

    /// The WGSL of both transforms' one-dimensional steps, `fn input_1d(x: array<f32, N>) ->
    /// array<f32, N>` (`Bᵀ x`) and `fn output_1d(x: array<f32, N>) -> array<f32, M>` (`Aᵀ x`),
    /// with the constants `N`, `M` and `R` (the kernel's side): straight-line sums that skip
    /// the zero coefficients and multiply by no ±1.
    pub(crate) fn wgsl(&self) -> String {
        let (n, m) = (self.n() as usize, self.out as usize);
        let mut s = format!(
            "// {}, generated from its matrices (src/families/winograd/minimal.rs)\n\
             const N: u32 = {n}u;\nconst M: u32 = {m}u;\nconst R: u32 = {}u;\n",
            self.name(),
            self.kernel
        );
        for (name, matrix, rows) in [("input_1d", self.bt, n), ("output_1d", self.at, m)] {
            s += &format!("fn {name}(x: array<f32, {n}>) -> array<f32, {rows}> {{\n    var y: array<f32, {rows}>;\n");
            for i in 0..rows {
                s += &format!("    y[{i}] = {};\n", sum_wgsl(&matrix[i * n..][..n]));
            }
            s += "    return y;\n}\n";
        }
        s
    }
}

#[cfg(test)]
/// `matrix x`, `matrix` of `rows` rows of `x.len()` columns, in f32, terms added left to right.
fn apply(matrix: &[f64], rows: usize, x: &[f32]) -> Vec<f32> {
    let n = x.len();
    (0..rows)
        .map(|i| {
            let mut acc = None;
            for (k, &c) in matrix[i * n..][..n].iter().enumerate() {
                let term = match c {
                    0.0 => continue,
                    1.0 | -1.0 => x[k],
                    c => c.abs() as f32 * x[k],
                };
                acc = Some(match (acc, c < 0.0) {
                    (None, false) => term,
                    (None, true) => -term,
                    (Some(a), false) => a + term,
                    (Some(a), true) => a - term,
                });
            }
            acc.unwrap_or(0.0)
        })
        .collect()
}

/// The WGSL of `Σ_k row[k] x[k]`, its terms in the order `apply` (the twin's) adds them.
fn sum_wgsl(row: &[f64]) -> String {
    let mut s = String::new();
    for (k, &c) in row.iter().enumerate() {
        if c == 0.0 {
            continue;
        }
        let term = match c.abs() {
            1.0 => format!("x[{k}]"),
            a => format!("{a:?} * x[{k}]"),
        };
        s += &match (s.is_empty(), c < 0.0) {
            (true, false) => term,
            (true, true) => format!("-{term}"),
            (false, false) => format!(" + {term}"),
            (false, true) => format!(" - {term}"),
        };
    }
    if s.is_empty() {
        s.push_str("0.0");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each algorithm computes the correlation `y_i = Σ_k d_{i+k} g_k` in one dimension
    /// exactly: `Σ_j Aᵀ[i][j] G[j][k] Bᵀ[j][l] = [l = i + k]` (the two-dimensional algorithm
    /// is its nesting).
    #[test]
    fn matrices_compute_the_correlation() {
        for a in ALL {
            let (n, m, r) = (a.n() as usize, a.out as usize, a.kernel as usize);
            assert_eq!((a.bt.len(), a.g.len(), a.at.len()), (n * n, n * r, m * n), "{}", a.name());
            for i in 0..m {
                for k in 0..r {
                    for l in 0..n {
                        let got: f64 = (0..n).map(|j| a.at[i * n + j] * a.g[j * r + k] * a.bt[j * n + l]).sum();
                        let want = if l == i + k { 1.0 } else { 0.0 };
                        assert!((got - want).abs() < 1e-12, "{}: i {i} k {k} l {l}: {got}", a.name());
                    }
                }
            }
        }
    }

    /// The transforms' f32 steps and their WGSL agree term by term.
    #[test]
    fn wgsl_sums_as_the_twin_does() {
        assert_eq!(sum_wgsl(&BT6[..6]), "4.0 * x[0] - 5.0 * x[2] + x[4]");
        assert_eq!(sum_wgsl(&BT6[6..12]), "-4.0 * x[1] - 4.0 * x[2] + x[3] + x[4]");
        assert_eq!(sum_wgsl(&[0.0; 3]), "0.0");
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(F4X4_3X3.input_transform(&x)[0], 4.0 - 15.0 + 5.0);
        assert_eq!(F4X4_3X3.output_transform(&x)[3], 2.0 - 3.0 + 32.0 - 40.0 + 6.0);
        let wgsl = F4X4_3X3.wgsl();
        assert!(wgsl.contains("fn output_1d(x: array<f32, 6>) -> array<f32, 4>"), "{wgsl}");
        assert!(wgsl.contains("y[3] = x[1] - x[2] + 8.0 * x[3] - 8.0 * x[4] + x[5];"), "{wgsl}");
    }

    #[test]
    fn lookups() {
        assert_eq!(of(4, 3), Some(&F4X4_3X3));
        assert_eq!(of(2, 5), Some(&F2X2_5X5));
        assert_eq!(of(4, 5), Some(&F4X4_5X5));
        assert_eq!(of(2, 7), None);
        assert_eq!(of(6, 3), Some(&F6X6_3X3));
        assert_eq!(of(6, 5), None);
        assert_eq!(F4X4_3X3.components(), 36);
        assert_eq!(F2X2_3X3.name(), "F(2×2, 3×3)");
        assert_eq!((F2X2_3X3.multiply_add_saving(), F4X4_3X3.multiply_add_saving()), (2.25, 4.0));
        assert_eq!((F4X4_3X3.transform_growth(), F2X2_5X5.transform_growth()), (2.25, 9.0));
    }
}
