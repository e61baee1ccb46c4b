//! The keys: their shape, the dealer's key generation, the batch and its encoding.

use crate::codec::{self, BitReader, BitWriter, Header, KeyKind};
use crate::error::{DecodeError, FssError};
use crate::prg::Prg;
use crate::rng::{CryptoRng, random_roots};
use crate::share::{Party, XorBit};
use crate::tree::{DealerTrees, ROOT_BITS, TreeKeys, check_keys, path_bit};
use crate::walk;
use crate::words::Words;

/// `ν`: outputs per leaf block are `2^ν = 128`.
pub const LEAF_BITS: u32 = 7;

/// Shape of a 1-bit DPF: the input width `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BitDpfParams {
    pub(super) domain_bits: u32,
}

impl BitDpfParams {
    /// A 1-bit DPF on `n = domain_bits` input bits.
    ///
    /// # Errors
    /// [`FssError::InvalidWidth`] unless `1 ≤ n ≤ 64`.
    pub fn new(domain_bits: u32) -> Result<BitDpfParams, FssError> {
        if !(1..=64).contains(&domain_bits) {
            return Err(FssError::InvalidWidth(domain_bits));
        }
        Ok(BitDpfParams { domain_bits })
    }

    /// Input width `n`.
    pub fn domain_bits(self) -> u32 {
        self.domain_bits
    }

    /// Tree depth `L = n − 7` (0 for a truth-table key).
    pub fn levels(self) -> u32 {
        self.domain_bits.saturating_sub(LEAF_BITS)
    }

    pub(super) fn is_table(self) -> bool {
        self.domain_bits <= LEAF_BITS
    }

    /// A table key's stored fields: their width and how many per key (a 128-bit table is
    /// its low then its high 64 bits).
    fn table_fields(self) -> (u32, usize) {
        let bits = 1u32 << self.domain_bits;
        (bits.min(64), bits.div_ceil(64) as usize)
    }

    /// One party's key material per key, in bits: `λ + (L−1)(λ+2) + 2λ`, or `2^n` for
    /// `n ≤ 7`.
    pub fn key_bits(self) -> u64 {
        if self.is_table() { 1 << self.domain_bits } else { TreeKeys::key_bits(self.levels() - 1) + 256 }
    }

    /// AES blocks for one point evaluation (`n − 7`, or 0 for a table).
    pub fn aes_per_eval(self) -> u64 {
        self.levels() as u64
    }
}

/// One party's keys for a batch of 1-bit DPFs of one shape. `Debug` shows only the shape;
/// the material is zeroized on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct BitDpfKeys {
    pub(super) params: BitDpfParams,
    pub(super) party: Party,
    /// Roots and the first `L − 1` levels (no levels for table keys).
    pub(super) tree: TreeKeys,
    /// Per key, the two leaf correction blocks as four 64-bit words (low half first; read
    /// in place in a bundle, [`crate::words`]); for a table key `[table share, 0]`.
    pub(super) leaf_cw: Words,
}

crate::wipe_on_drop!(BitDpfKeys { wipe: [], zeroize: [leaf_cw, tree] });

/// Key `k`'s two leaf correction blocks in `words` (four 64-bit words per key).
#[inline(always)]
pub(super) fn leaf_at(words: &[u64], k: usize) -> [u128; 2] {
    let c = &words[4 * k..4 * k + 4];
    [u128::from(c[0]) | u128::from(c[1]) << 64, u128::from(c[2]) | u128::from(c[3]) << 64]
}

impl std::fmt::Debug for BitDpfKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BitDpfKeys")
            .field("params", &self.params)
            .field("party", &self.party)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// The shares one evaluation yields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmpShares {
    /// Share of `1{y < α}`.
    pub lt: XorBit,
    /// Share of `1{y = α}`.
    pub eq: XorBit,
}

impl CmpShares {
    /// Share of `1{y > α} = 1 ⊕ 1{y < α} ⊕ 1{y = α}` (the two are exclusive); party 0 adds
    /// the constant.
    pub fn gt(self, party: Party) -> XorBit {
        XorBit(self.lt.0 ^ self.eq.0 ^ (party == Party::P0))
    }
}

/// Deal both parties' keys at the points `α_i`, all levels in lockstep.
///
/// # Errors
/// [`FssError::PointOutOfDomain`] if some `α ≥ 2^n`.
pub fn keygen<R: CryptoRng + ?Sized>(
    params: BitDpfParams,
    alphas: &[u64],
    rng: &mut R,
) -> Result<(BitDpfKeys, BitDpfKeys), FssError> {
    walk::check_points(alphas, params.domain_bits)?;
    let m = alphas.len();
    let key = |party, tree, leaf_cw| BitDpfKeys { params, party, tree, leaf_cw };
    if params.is_table() {
        let (t0, t1) = (TreeKeys::with_capacity(0, 0), TreeKeys::with_capacity(0, 0));
        // One draw for the batch (a block per key, 16 little-endian bytes), each
        // party's leaf words `[lo, hi, 0, 0]` written straight from it.
        let mut draws = vec![0u8; 16 * m];
        rng.fill_bytes(&mut draws);
        let tm = table_mask(params.domain_bits);
        let (mut w0, mut w1) = (Vec::with_capacity(4 * m), Vec::with_capacity(4 * m));
        for (&a, d) in alphas.iter().zip(draws.as_chunks::<16>().0) {
            let s0 = u128::from_le_bytes(*d) & tm;
            let s1 = s0 ^ (1u128 << a);
            w0.extend_from_slice(&[s0 as u64, (s0 >> 64) as u64, 0, 0]);
            w1.extend_from_slice(&[s1 as u64, (s1 >> 64) as u64, 0, 0]);
        }
        crate::wipe::wipe(&mut draws);
        return Ok((key(Party::P0, t0, Words::Owned(w0)), key(Party::P1, t1, Words::Owned(w1))));
    }
    let (n, levels) = (params.domain_bits, params.levels());
    let prg = Prg::global();
    let roots = random_roots(rng, m);
    let mut trees = DealerTrees::new(roots, levels - 1);
    for i in 0..levels - 1 {
        trees.expand(prg);
        trees.step(i, |k| path_bit(alphas[k], n, i));
    }
    // Last level: the full hash outputs are the leaf blocks (§3.3), the point's bit set in
    // the block on its path (branch-free, on the words `[L.lo, L.hi, R.lo, R.hi]`).
    trees.expand(prg);
    let mut leaf_cw = trees.children_xor();
    for (w, &alpha) in leaf_cw.chunks_exact_mut(4).zip(alphas) {
        let right = path_bit(alpha, n, levels - 1).wrapping_neg();
        let bit = alpha & 127;
        let one = 1u64 << (bit & 63);
        let (lo, hi) = (one & (bit >> 6).wrapping_sub(1), one & (bit >> 6).wrapping_neg());
        w[0] ^= lo & !right;
        w[1] ^= hi & !right;
        w[2] ^= lo & right;
        w[3] ^= hi & right;
    }
    let (t0, t1) = trees.into_keys();
    let (w0, w1) = Words::Owned(leaf_cw).into_pair();
    Ok((key(Party::P0, t0, w0), key(Party::P1, t1, w1)))
}

impl BitDpfKeys {
    /// The keys' shape.
    pub fn params(&self) -> BitDpfParams {
        self.params
    }

    /// The party these keys belong to.
    pub fn party(&self) -> Party {
        self.party
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.leaf_cw.len() / 4
    }

    /// Key `k`'s two leaf correction blocks.
    #[inline(always)]
    pub(super) fn leaf(&self, k: usize) -> [u128; 2] {
        leaf_at(&self.leaf_cw, k)
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys `start..end` as a batch of their own.
    ///
    /// # Panics
    /// If the range is out of bounds (a caller bug).
    pub fn slice(&self, start: usize, end: usize) -> BitDpfKeys {
        let tree = if self.params.is_table() { self.tree.clone() } else { self.tree.slice(start, end) };
        BitDpfKeys {
            params: self.params,
            party: self.party,
            tree,
            leaf_cw: Words::Owned(self.leaf_cw[4 * start..4 * end].to_vec()),
        }
    }

    /// One party's key material per key, in bytes (rounded up).
    pub fn key_bytes(&self) -> usize {
        self.params.key_bits().div_ceil(8) as usize
    }

    /// Append the raw material of the batch (no envelope) to a bit stream.
    pub fn write_material(&self, w: &mut BitWriter) {
        // No share words here: a recording pass skips it.
        if w.keeps_only_shares() {
            return;
        }
        if self.params.is_table() {
            // Each key's table in one run of fields: itself, or (128 bits) its low then its
            // high 64 bits.
            let (bits, per) = self.params.table_fields();
            w.put_run(bits, per * self.len(), |i| (self.leaf(i / per)[0] >> (64 * (i % per))) as u64);
            return;
        }
        self.tree.write(w);
        // Each key's two leaf blocks, low half first (as `put_u128` twice).
        let cws: &[u64] = &self.leaf_cw;
        w.put_side_words(cws);
    }

    /// Read `count` keys written by [`BitDpfKeys::write_material`].
    ///
    /// # Errors
    /// [`DecodeError`] if the stream is short or a field is invalid.
    pub fn read_material(
        params: BitDpfParams,
        party: Party,
        count: usize,
        r: &mut BitReader<'_>,
    ) -> Result<BitDpfKeys, DecodeError> {
        check_keys(r, count, params.key_bits(), if params.is_table() { 0 } else { ROOT_BITS })?;
        if params.is_table() {
            // (One run, as `write_material` writes it.)
            let (bits, per) = params.table_fields();
            let mut fields = Vec::with_capacity(per * count);
            r.get_run(bits, per * count, &mut fields)?;
            let leaf_cw: Vec<u64> =
                fields.chunks_exact(per).flat_map(|t| [t[0], t.get(1).copied().unwrap_or(0), 0, 0]).collect();
            crate::wipe::wipe(&mut fields);
            let leaf_cw = Words::Owned(leaf_cw);
            return Ok(BitDpfKeys { params, party, tree: TreeKeys::with_capacity(0, 0), leaf_cw });
        }
        let tree = TreeKeys::read(r, params.levels() - 1, count)?;
        let leaf_cw = r.get_side_words(4 * count)?;
        Ok(BitDpfKeys { params, party, tree, leaf_cw })
    }

    /// The standalone, versioned, checksummed encoding (see [`crate::codec`]).
    ///
    /// # Panics
    /// If the batch holds more than `u32::MAX` keys.
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            kind: KeyKind::BitDpf,
            party: self.party,
            domain_bits: self.params.domain_bits as u8,
            out_bits: 1,
            payload_words: 1,
            variant: 0,
            count: u32::try_from(self.len()).expect("at most u32::MAX keys per encoding"),
        };
        codec::seal(header, |w| self.write_material(w))
    }

    /// Decode [`BitDpfKeys::encode`]'s output.
    ///
    /// # Errors
    /// [`DecodeError`] for truncated, corrupted, wrong-version or wrong-kind input.
    pub fn decode(bytes: &[u8]) -> Result<BitDpfKeys, DecodeError> {
        let (h, material) = codec::open(bytes, KeyKind::BitDpf)?;
        let params = BitDpfParams::new(h.domain_bits as u32)
            .map_err(|_| DecodeError::InvalidField("1-bit DPF width"))?;
        if h.out_bits != 1 || h.payload_words != 1 || h.variant != 0 {
            return Err(DecodeError::InvalidField("1-bit DPF output shape"));
        }
        let count = h.count as usize;
        codec::expect_material_len(material, count as u64 * params.key_bits())?;
        let mut r = BitReader::new(material);
        let keys = BitDpfKeys::read_material(params, h.party, count, &mut r)?;
        r.finish()?;
        Ok(keys)
    }
}

fn table_mask(n: u32) -> u128 {
    if n >= LEAF_BITS { u128::MAX } else { (1u128 << (1u32 << n)) - 1 }
}
