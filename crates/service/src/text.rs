//! Text from a peer, a file or a user made safe to print: control characters escaped,
//! length bounded (reliability probe: a model name of control characters and 64 KiB went
//! into the servers' logs as it came).

/// At most `max` characters of `s`, with control characters (newlines, escapes, ANSI
/// sequences) shown as `\u{..}` and a `…` where it was cut.
pub fn clean(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The length log lines keep of a peer's reason or a name.
pub const LOG_CHARS: usize = 200;

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn control_characters_are_escaped_and_long_text_cut() {
        assert_eq!(clean("bert-tiny", 64), "bert-tiny");
        assert_eq!(clean("a\nb\x1b[31m", 64), "a\\u{a}b\\u{1b}[31m");
        assert_eq!(clean(&"x".repeat(1000), 5), "xxxxx…");
    }
}
