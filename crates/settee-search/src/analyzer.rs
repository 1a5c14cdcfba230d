//! The analyzers an index may name (`default_analyzer`,
//! `field_analyzers`), built as tantivy text analyzers.
//!
//! Owns the table of names: what CouchDB's Nouveau lists that this
//! server has (`standard`, `keyword`, `simple`, `simple_asciifolding`,
//! `whitespace`, `email`, `classic` and the language analyzers with a
//! snowball stemmer). Invariant: [`known`] and [`build`] agree; a name not
//! in the table is refused when the index is defined, never replaced by
//! another analyzer.

use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RawTokenizer, RegexTokenizer, RemoveLongFilter,
    Stemmer, StopWordFilter, TextAnalyzer, WhitespaceTokenizer,
};

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

/// Whether `name` is an analyzer this server has.
pub fn known(name: &str) -> bool {
    matches!(
        name,
        "standard"
            | "keyword"
            | "simple"
            | "simple_asciifolding"
            | "whitespace"
            | "email"
            | "classic"
    ) || language(name).is_some()
}

/// The analyzer named `name` (None: not [`known`]).
pub fn build(name: &str) -> Option<TextAnalyzer> {
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
        ] {
            assert!(known(name) && build(name).is_some(), "{name}");
        }
        for name in ["nope", "", "Standard", "japanese"] {
            assert!(!known(name) && build(name).is_none(), "{name}");
        }
    }
}
