use compiler::composite;
fn main() {
    let s = composite::softmax(37, 37 - 12 + 1, 12, 256, 128, false).unwrap();
    for p in [&s.exp.0, &s.recip.0] { dump(p); }
}
fn dump(p: &compiler::program::Program) {
    println!("{:?} pieces {}", p, p.spec.pieces.len());
    println!("families {:?}", p.families.iter().map(|f| (f.shift, f.bits, f.points.len(), f.eq, f.points.first().map(|x|x.1), f.points.last().map(|x|x.1))).collect::<Vec<_>>());
    println!("leaves {} locals {} pvars {} pmonos {} words {}", p.leaves.len(), p.locals, p.pvars.len(), p.pmonos.len(), p.words.len());
    for (i, ex) in p.exchanges.iter().enumerate() {
        println!("ex {i}: bits {} beaver {} outputs {}  out-terms {:?}", ex.bits.len(), ex.beaver.len(), ex.outputs.len(), ex.outputs.iter().map(|f| f.terms.len()).collect::<Vec<_>>());
    }
    println!("cost {:?} key bytes {}", p.cost(), p.cost().key_bits / 8);
}
