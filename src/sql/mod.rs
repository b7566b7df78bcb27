//! PLACEHOLDER until the sqlnorm branch lands (replaced by the real tokenizer at merge).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Digest(pub u64);
impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}
pub fn digest(text: &[u8], max_len: usize) -> Digest {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in normalize(text, max_len).bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    Digest(h)
}
pub fn normalize(text: &[u8], max_len: usize) -> String {
    let t = &text[..text.len().min(max_len)];
    let s = String::from_utf8_lossy(t);
    let mut out = String::new();
    let mut prev_digit = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !prev_digit {
                out.push('?');
            }
            prev_digit = true;
        } else {
            prev_digit = false;
            out.push(c);
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}
pub enum Statement<'a> {
    Use(&'a [u8]),
    Other,
}
pub fn classify(text: &[u8]) -> Statement<'_> {
    let t = text.trim_ascii();
    if t.len() > 4 && t[..4].eq_ignore_ascii_case(b"use ") {
        return Statement::Use(t[4..].trim_ascii());
    }
    Statement::Other
}
