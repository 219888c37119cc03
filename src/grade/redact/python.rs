//! Just enough of Python's lexer to find string literals: comments, prefixes (`r`, `b`, `f`,
//! ...), single and triple quotes, backslash escapes. It never fails: on odd input it finds
//! fewer literals, and the line rule still covers the source.

/// The values of every string literal in `source`, escapes resolved (except in raw strings).
/// f-string replacement fields stay in the value; the caller splits at placeholders.
pub(super) fn string_literals(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut literals = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '\'' || c == '"' {
            i = read_string(&chars, i, false, &mut literals);
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i]
                .iter()
                .collect::<String>()
                .to_ascii_lowercase();
            let is_prefix = word.len() <= 2 && word.chars().all(|c| "rbfut".contains(c));
            if is_prefix && matches!(chars.get(i), Some('\'' | '"')) {
                i = read_string(&chars, i, word.contains('r'), &mut literals);
            }
        } else {
            i += 1;
        }
    }
    literals
}

/// Reads the literal whose opening quote is at `start`; returns the index after it.
fn read_string(chars: &[char], start: usize, raw: bool, out: &mut Vec<String>) -> usize {
    let quote = chars[start];
    let triple = chars.get(start + 1) == Some(&quote) && chars.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    let mut value = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == quote
            && (!triple || (chars.get(i + 1) == Some(&quote) && chars.get(i + 2) == Some(&quote)))
        {
            out.push(value);
            return i + if triple { 3 } else { 1 };
        }
        if c == '\n' && !triple {
            break;
        }
        if c == '\\' && i + 1 < chars.len() {
            let next = chars[i + 1];
            i += 2;
            if raw {
                value.push('\\');
                value.push(next);
                continue;
            }
            match next {
                'n' => value.push('\n'),
                't' => value.push('\t'),
                'r' => value.push('\r'),
                '\n' => {}
                '\\' | '\'' | '"' => value.push(next),
                other => {
                    value.push('\\');
                    value.push(other);
                }
            }
            continue;
        }
        value.push(c);
        i += 1;
    }
    out.push(value);
    i
}
