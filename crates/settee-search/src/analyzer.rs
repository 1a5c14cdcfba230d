//! The analyzers an index may name (`default_analyzer`,
//! `field_analyzers`), built as tantivy text analyzers.
//!
//! Owns the table of names: what CouchDB's Nouveau and Clouseau list
//! that this server has (`standard`, `keyword`, `simple`,
//! `simple_asciifolding`, `whitespace`, `email`, `classic`, `cjk` and
//! `japanese` as CJK bigrams, and the language analyzers with a snowball
//! stemmer). An analyzer is named by a *key*: its name, or (for a
//! Clouseau-style index) the JSON `{"name": …, "stopwords": […]}` when
//! it removes stop words ([`key`]). Invariant: [`known`] and [`build`]
//! agree; a name not in the table is refused when the index is defined,
//! never replaced by another analyzer.

use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RawTokenizer, RegexTokenizer, RemoveLongFilter,
    Stemmer, StopWordFilter, TextAnalyzer, Token, TokenStream, Tokenizer, WhitespaceTokenizer,
};

/// The English stop words of Lucene 4's `StandardAnalyzer`,
/// `ClassicAnalyzer` and `CJKAnalyzer` (Clouseau's engine), which remove
/// them unless told otherwise.
pub const LUCENE4_ENGLISH_STOP: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// The key of a Clouseau-style index's analyzer `name` (with its own
/// stop words, or Lucene 4's defaults where that analyzer has them).
pub fn key(name: &str, stopwords: Option<Vec<String>>) -> crate::Result<String> {
    if name == "perfield" || !known(name) {
        return Err(crate::SearchError::BadRequest(format!(
            "no_such_analyzer: {name}"
        )));
    }
    let stop = match stopwords {
        Some(words) => Some(words),
        None if matches!(name, "standard" | "classic" | "cjk") => {
            Some(LUCENE4_ENGLISH_STOP.iter().map(|w| w.to_string()).collect())
        }
        None => None,
    };
    Ok(match stop {
        None => name.to_string(),
        Some(words) => serde_json::json!({"name": name, "stopwords": words}).to_string(),
    })
}

/// A key's analyzer name and stop words.
fn parse_key(key: &str) -> Option<(String, Option<Vec<String>>)> {
    if !key.starts_with('{') {
        return Some((key.to_string(), None));
    }
    let v: serde_json::Value = serde_json::from_str(key).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let words = v
        .get("stopwords")?
        .as_array()?
        .iter()
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect();
    Some((name, Some(words)))
}

/// Whether a character is written in a CJK script (cut into bigrams).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF | 0x3040..=0x30FF | 0x3130..=0x318F | 0x31F0..=0x31FF
        | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF
        | 0xFF66..=0xFF9F | 0x20000..=0x2FA1F)
}

/// CJK text as Lucene's CJK analyzer cuts it: each run of CJK characters
/// as its overlapping bigrams (a lone character as itself), other words
/// whole.
#[derive(Clone, Default)]
pub struct CjkTokenizer;

/// The tokens of one text, made up front.
pub struct VecTokenStream {
    tokens: Vec<Token>,
    next: usize,
}

impl TokenStream for VecTokenStream {
    fn advance(&mut self) -> bool {
        if self.next < self.tokens.len() {
            self.next += 1;
            true
        } else {
            false
        }
    }

    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

impl Tokenizer for CjkTokenizer {
    type TokenStream<'a> = VecTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream {
        let mut tokens = Vec::new();
        let mut push = |from: usize, to: usize| {
            tokens.push(Token {
                offset_from: from,
                offset_to: to,
                position: tokens.len(),
                text: text[from..to].to_string(),
                position_length: 1,
            })
        };
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let end_of = |i: usize| chars.get(i + 1).map_or(text.len(), |c| c.0);
        let mut i = 0;
        while i < chars.len() {
            let (at, c) = chars[i];
            if is_cjk(c) {
                let mut j = i;
                while j + 1 < chars.len() && is_cjk(chars[j + 1].1) {
                    j += 1;
                }
                if i == j {
                    push(at, end_of(i));
                } else {
                    for (k, (from, _)) in chars.iter().enumerate().take(j).skip(i) {
                        push(*from, end_of(k + 1));
                    }
                }
                i = j + 1;
            } else if c.is_alphanumeric() || c == '_' {
                let mut j = i;
                while j + 1 < chars.len() {
                    let n = chars[j + 1].1;
                    if (n.is_alphanumeric() || n == '_') && !is_cjk(n) {
                        j += 1;
                    } else {
                        break;
                    }
                }
                push(at, end_of(j));
                i = j + 1;
            } else {
                i += 1;
            }
        }
        VecTokenStream { tokens, next: 0 }
    }
}

/// Words as Unicode's word-break rules mostly cut them (letters and
/// digits, joined across `.`, `'` and `_` between them), as Lucene's
/// standard tokenizer does: `renovations.com` and `can't` stay whole.
const WORDS: &str = r"[\p{L}\p{N}_]+(?:[.'’][\p{L}\p{N}_]+)*";

/// Tokens longer than this are dropped (Lucene's standard tokenizer caps
/// token length at 255).
const TOKEN_MAX: usize = 255;

fn language(name: &str) -> Option<Language> {
    Some(match name {
        "arabic" => Language::Arabic,
        "danish" => Language::Danish,
        "dutch" => Language::Dutch,
        "english" => Language::English,
        "finnish" => Language::Finnish,
        "french" => Language::French,
        "german" => Language::German,
        "hungarian" => Language::Hungarian,
        "italian" => Language::Italian,
        "norwegian" => Language::Norwegian,
        // Nouveau's spelling.
        "portugese" | "portuguese" => Language::Portuguese,
        "romanian" => Language::Romanian,
        "russian" => Language::Russian,
        "spanish" => Language::Spanish,
        "swedish" => Language::Swedish,
        "turkish" => Language::Turkish,
        _ => return None,
    })
}

/// Whether `name` (or analyzer key) is an analyzer this server has.
pub fn known(name: &str) -> bool {
    let Some((name, _)) = parse_key(name) else {
        return false;
    };
    matches!(
        name.as_str(),
        "standard"
            | "keyword"
            | "simple"
            | "simple_asciifolding"
            | "whitespace"
            | "email"
            | "classic"
            | "cjk"
            | "japanese"
    ) || language(&name).is_some()
}

/// The analyzer of key `key` (None: not [`known`]).
pub fn build(key: &str) -> Option<TextAnalyzer> {
    let (name, stop) = parse_key(key)?;
    let Some(words) = stop else {
        return build_named(&name);
    };
    let stop = || StopWordFilter::remove(words.clone());
    let words_tok = || RegexTokenizer::new(WORDS).expect("the word pattern compiles");
    Some(match name.as_str() {
        "standard" | "classic" | "email" => TextAnalyzer::builder(words_tok())
            .filter(RemoveLongFilter::limit(TOKEN_MAX))
            .filter(LowerCaser)
            .filter(stop())
            .build(),
        "cjk" | "japanese" => TextAnalyzer::builder(CjkTokenizer)
            .filter(LowerCaser)
            .filter(stop())
            .build(),
        "keyword" => return build_named("keyword"),
        "simple" | "simple_asciifolding" => {
            TextAnalyzer::builder(RegexTokenizer::new(r"\p{L}+").expect("letters"))
                .filter(LowerCaser)
                .filter(stop())
                .build()
        }
        "whitespace" => TextAnalyzer::builder(WhitespaceTokenizer::default())
            .filter(stop())
            .build(),
        other => {
            let lang = language(other)?;
            TextAnalyzer::builder(words_tok())
                .filter(RemoveLongFilter::limit(TOKEN_MAX))
                .filter(LowerCaser)
                .filter(stop())
                .filter(Stemmer::new(lang))
                .build()
        }
    })
}

/// The analyzer named `name`, with its own stop words if any.
fn build_named(name: &str) -> Option<TextAnalyzer> {
    let words = || RegexTokenizer::new(WORDS).expect("the word pattern compiles");
    let letters = || RegexTokenizer::new(r"\p{L}+").expect("the letter pattern compiles");
    Some(match name {
        "standard" | "classic" => TextAnalyzer::builder(words())
            .filter(RemoveLongFilter::limit(TOKEN_MAX))
            .filter(LowerCaser)
            .build(),
        "email" => TextAnalyzer::builder(
            RegexTokenizer::new(r"[\p{L}\p{N}_.+\-]+@[\p{L}\p{N}\-]+(?:\.[\p{L}\p{N}\-]+)+|[\p{L}\p{N}_]+(?:[.'’][\p{L}\p{N}_]+)*")
                .expect("the email pattern compiles"),
        )
        .filter(LowerCaser)
        .build(),
        "keyword" => TextAnalyzer::builder(RawTokenizer::default()).build(),
        "simple" => TextAnalyzer::builder(letters()).filter(LowerCaser).build(),
        "simple_asciifolding" => TextAnalyzer::builder(letters())
            .filter(LowerCaser)
            .filter(AsciiFoldingFilter)
            .build(),
        "whitespace" => TextAnalyzer::builder(WhitespaceTokenizer::default()).build(),
        "cjk" | "japanese" => TextAnalyzer::builder(CjkTokenizer)
            .filter(LowerCaser)
            .build(),
        other => {
            let lang = language(other)?;
            let builder = TextAnalyzer::builder(words())
                .filter(RemoveLongFilter::limit(TOKEN_MAX))
                .filter(LowerCaser);
            match StopWordFilter::new(lang) {
                Some(stop) => builder.filter(stop).filter(Stemmer::new(lang)).build(),
                None => builder.filter(Stemmer::new(lang)).build(),
            }
        }
    })
}

/// The tokens `name` makes of `text`, in order.
pub fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, text: &str) -> Vec<String> {
        tokens(&mut build(name).unwrap(), text)
    }

    #[test]
    fn analyzers_cut_as_documented() {
        // The examples of CouchDB's Nouveau documentation.
        assert_eq!(
            run("keyword", "ablanks@renovations.com"),
            ["ablanks@renovations.com"]
        );
        assert_eq!(
            run("standard", "ablanks@renovations.com"),
            ["ablanks", "renovations.com"]
        );
        assert_eq!(
            run("standard", "The Quick-Brown fox"),
            ["the", "quick", "brown", "fox"]
        );
        assert_eq!(run("whitespace", "The Quick-Brown"), ["The", "Quick-Brown"]);
        assert_eq!(run("simple", "it's 42 Foxes"), ["it", "s", "foxes"]);
        assert_eq!(
            run("simple_asciifolding", "Crème brûlée"),
            ["creme", "brulee"]
        );
        assert_eq!(run("english", "the running foxes"), ["run", "fox"]);
        assert_eq!(
            run("email", "Mail ABlanks@Renovations.com"),
            ["mail", "ablanks@renovations.com"]
        );
    }

    #[test]
    fn known_and_build_agree() {
        for name in [
            "standard",
            "keyword",
            "simple",
            "simple_asciifolding",
            "whitespace",
            "email",
            "classic",
            "english",
            "french",
            "german",
            "spanish",
            "portugese",
            "russian",
            "turkish",
            "cjk",
            "japanese",
        ] {
            assert!(known(name) && build(name).is_some(), "{name}");
        }
        for name in ["nope", "", "Standard", "perfield"] {
            assert!(!known(name) && build(name).is_none(), "{name}");
        }
    }

    #[test]
    fn cjk_text_is_cut_into_bigrams_and_keys_carry_stop_words() {
        assert_eq!(run("cjk", "東京都 Tokyo"), ["東京", "京都", "tokyo"]);
        assert_eq!(run("japanese", "猫"), ["猫"]);
        let standard = key("standard", None).unwrap();
        assert!(known(&standard));
        assert_eq!(run(&standard, "The fox and the hound"), ["fox", "hound"]);
        let own = key("english", Some(vec!["fox".into()])).unwrap();
        assert_eq!(run(&own, "the running foxes fox"), ["the", "run", "fox"]);
        assert_eq!(key("keyword", None).unwrap(), "keyword");
        assert!(key("perfield", None).is_err() && key("klingon", None).is_err());
    }
}
