"""English-like text made offline, for the corpus' jobs that read a text file (a language
model's corpus, a tokenizer's training text) where the original script downloads one.

The words are drawn Zipf-distributed from a vocabulary of made-up lower-case words (3-9
letters), each followed half of the time by one of its few usual successors, in sentences
of 4-20 words with commas and full stops, a capital after each stop, and paragraphs of a
few sentences: something for a model to learn and a tokenizer to merge, with the length and
character mix of prose. The same ``seed`` gives the same text.
"""

from __future__ import annotations

import random

LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
#: letter weights, roughly English's (most frequent first)
WEIGHTS = [12, 9, 8, 8, 7, 7, 6, 6, 6, 4, 4, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1]


def vocabulary(size: int, rng: random.Random) -> list[str]:
    """``size`` distinct made-up words; the first ones short (the frequent words are)."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        n = min(9, 3 + int(rng.expovariate(1.0) * (1 + len(words) / size * 3)))
        w = "".join(rng.choices(LETTERS, WEIGHTS, k=n))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def english_like_text(chars: int, seed: int = 0, vocab: int = 5000) -> str:
    """About ``chars`` characters of text, in paragraphs separated by blank lines."""
    rng = random.Random(seed)
    words = vocabulary(vocab, rng)
    cum: list[float] = []
    for i in range(vocab):
        cum.append((cum[-1] if cum else 0.0) + 1.0 / (i + 1))
    successors = [rng.sample(range(vocab), 3) for _ in range(vocab)]
    out: list[str] = []
    size = 0
    prev = 0
    draws: list[int] = []
    while size < chars:
        paragraph = []
        for _ in range(rng.randint(2, 6)):
            sentence = []
            for _ in range(rng.randint(4, 20)):
                if not draws:  # Zipf draws in bulk (one at a time is slow)
                    draws = rng.choices(range(vocab), cum_weights=cum, k=4096)
                i = rng.choice(successors[prev]) if rng.random() < 0.5 else draws.pop()
                sentence.append(words[i])
                prev = i
                if rng.random() < 0.08:
                    sentence[-1] += ","
            sentence[0] = sentence[0].capitalize()
            sentence[-1] = sentence[-1].rstrip(",") + "."
            paragraph.append(" ".join(sentence))
        text = " ".join(paragraph)
        out.append(text)
        size += len(text) + 2
    return "\n\n".join(out) + "\n"
