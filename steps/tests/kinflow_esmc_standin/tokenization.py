"""Stand-in ESM C tokenizer: BOS 0, PAD 1, EOS 2, then the amino acids."""

ALPHABET = "LAGVSERTIDPKQNFYMHWCXBUZO"


class EsmSequenceTokenizer:
    bos_token_id = 0
    pad_token_id = 1
    eos_token_id = 2

    def __init__(self):
        self.vocab = {a: i + 3 for i, a in enumerate(ALPHABET)}

    def __len__(self):
        return len(self.vocab) + 3

    def encode(self, seq):
        return [self.bos_token_id] + [self.vocab[a] for a in seq] + [self.eos_token_id]


def get_esmc_model_tokenizers():
    return EsmSequenceTokenizer()
