"""llama.cpp's prompt cache: slots that keep one prompt each, and the prompt cache in host RAM.

Place in the map (docs/architecture.md, "The emulator"): the prefix cache of the ``llamacpp``
profile, with the interface of ``RadixCache`` and ``BlockCache`` (``match``, ``lock``,
``unlock``, ``insert``, ``reset``) so the engine model and its scheduler drive it unchanged.
Every rule is ``llama-server``'s (``tools/server/server-context.cpp`` and
``server-task.cpp``, read at commit 0c1e570; sources per rule in docs/emulator.md):

- **Slots.** ``slots`` slots, each holding the tokens of the last sequence it served (prompt
  and output). A request takes an idle slot: the one whose common prefix with its prompt is
  the largest share of the prompt, when that share is over ``similarity`` (ties: the lowest
  slot); else the least recently released (ties: the highest slot). Busy and empty slots are
  skipped by the similarity pass. The scheduler keeps at most ``slots`` requests running, so
  the rest wait, first come first served (llama.cpp's deferred queue).
- **Reuse in a slot.** The cached tokens are the common prefix of the slot's tokens and the
  prompt, one less when it is the whole prompt (the last token is always computed). With a
  sliding-window model (``swa_tokens``: Gemma 3's 512) a prefix is reusable as it stands only
  while the slot's window cache still holds the window that ends at it; otherwise it falls
  back to the newest context checkpoint at or before it (``n_past`` = the checkpoint's tokens
  less one), or to nothing. Checkpoints are taken while a prompt is computed: at its new
  tokens' start when they are within ``4 + ubatch`` of its end, at ``N - (4 + ubatch)`` and at
  ``N - 4`` (the scheduler breaks the prompt's chunks there, ``prefill_tail_breaks``); at
  most 32 a slot, the oldest dropped.
- **The host prompt cache** (``--cache-ram``, ``ram_tokens`` of room; None: off). When a slot
  is given to a prompt that does not mostly extend what it holds (chosen as least recently
  used, or kept under half of its tokens), its sequence is saved there, and the entry that
  keeps a larger share of itself *and* matches a larger share of the prompt than the slot
  does (an entry keeping under a quarter of itself is never taken) moves into the slot.
  With ``cache_idle_slots`` every idle slot is saved there each time a request starts
  (and, with a unified KV, emptied). Saving skips a sequence an entry already holds whole
  and drops the entries it extends; the oldest entries go first when the room runs out.
  Tokens restored from it count as cached, as llama.cpp reports them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from swarm.engines.llamacpp import CHECKPOINT_TAIL
from swarm.token_ids import TokenIds, as_token_ids, common_prefix

#: llama.cpp's ``--ctx-checkpoints`` default: checkpoints kept per slot
CHECKPOINTS_PER_SLOT = 32
#: ``server_prompt_cache::load`` never takes an entry that would keep less than this share of it
RAM_MIN_KEEP = 0.25
#: a slot chosen by similarity that keeps less than this share of its tokens is saved to RAM first
SLOT_SAVE_BELOW_KEEP = 0.5


def pad256(n: int) -> int:
    return -(-n // 256) * 256


@dataclass
class Slot:
    """One slot: its tokens, its context checkpoints (token counts), whether a request holds
    it, and when it was last released (a logical tick; -1: never)."""

    index: int
    tokens: TokenIds = field(default_factory=lambda: array("q"))
    checkpoints: list[int] = field(default_factory=list)
    busy: bool = False
    last_used: int = -1


@dataclass
class _Entry:
    tokens: TokenIds
    checkpoints: list[int]


@dataclass(frozen=True)
class SlotChoice:
    """Where a prompt would go: the slot, the RAM entry that would move into it (None: none),
    whether the slot's sequence is saved to RAM first, and the cached tokens it would get."""

    slot: Slot
    entry: _Entry | None
    save_first: bool
    cached: int
    from_ram: int


class SlotCache:
    """``slots`` slots and an optional host prompt cache; see the module docstring."""

    block_tokens = 1
    #: a slot takes its prompt when it is locked (``lock``), not on ``insert``
    fills_on_lock = True

    def __init__(
        self,
        slots: int,
        *,
        similarity: float = 0.1,
        ram_tokens: int | None = None,
        cache_idle_slots: bool = True,
        kv_unified: bool = False,
        swa_tokens: int = 0,
        ubatch_tokens: int = 512,
    ) -> None:
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.slots = [Slot(i) for i in range(slots)]
        self.similarity = similarity
        self.ram_tokens = ram_tokens
        self.cache_idle_slots = cache_idle_slots and ram_tokens is not None
        self.kv_unified = kv_unified
        self.swa_tokens = swa_tokens
        self.ubatch_tokens = ubatch_tokens
        #: the window cache's cells a slot has (``pad256(n_swa + n_ubatch)``, llama-kv-cache-iswa.cpp)
        self.swa_cells = pad256(swa_tokens + ubatch_tokens) if swa_tokens else 0
        self.ram: list[_Entry] = []
        self._tick = 0
        self.evicted_tokens = 0
        #: tokens restored from the host prompt cache, in all
        self.loaded_tokens = 0
        #: unused: the slots' own saving to RAM is this cache's host tier
        self.on_evict: Callable[[TokenIds], object] | None = None

    @property
    def size_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.slots)

    @property
    def ram_size_tokens(self) -> int:
        return sum(len(e.tokens) for e in self.ram)

    # -- choosing a slot ----------------------------------------------------------------------

    def _idle(self) -> list[Slot]:
        return [s for s in self.slots if not s.busy]

    def choose(self, tokens: Sequence[object]) -> SlotChoice | None:
        """Where ``tokens`` (ids, or words) would go now (None: no slot is idle)."""
        prompt = as_token_ids(tokens)
        idle = self._idle()
        if not idle:
            return None
        best: Slot | None = None
        best_sim = 0.0
        if self.similarity > 0 and prompt:
            for slot in idle:
                if not slot.tokens:
                    continue
                sim = common_prefix(slot.tokens, prompt) / len(prompt)
                if sim > best_sim and sim > self.similarity:
                    best, best_sim = slot, sim
        save_first = best is None
        if best is None:
            for slot in idle:
                if best is None or slot.last_used <= best.last_used:
                    best = slot
        else:
            keep = common_prefix(best.tokens, prompt) / len(best.tokens)
            save_first = keep < SLOT_SAVE_BELOW_KEEP
        assert best is not None
        entry = self._ram_entry(best, prompt) if save_first and self.ram_tokens is not None else None
        tokens, checkpoints = (entry.tokens, entry.checkpoints) if entry else (best.tokens, best.checkpoints)
        cached = self._reusable(tokens, checkpoints, prompt)
        return SlotChoice(best, entry, save_first, cached, cached if entry else 0)

    def _ram_entry(self, slot: Slot, prompt: TokenIds) -> _Entry | None:
        """The RAM entry that would move into ``slot`` for ``prompt``: scanned oldest first, one
        that keeps a larger share of itself and matches a larger share of the prompt than the
        best so far (the slot's own to begin with)."""
        lcp = common_prefix(slot.tokens, prompt)
        keep_best = lcp / len(slot.tokens) if slot.tokens else -1.0
        sim_best = lcp / len(prompt) if prompt else 0.0
        chosen = None
        for entry in self.ram:
            n = common_prefix(entry.tokens, prompt)
            keep = n / len(entry.tokens)
            sim = n / len(prompt) if prompt else 0.0
            if keep < RAM_MIN_KEEP:
                continue
            if keep_best < keep and sim_best < sim:
                keep_best, sim_best, chosen = keep, sim, entry
        return chosen

    def _reusable(self, tokens: TokenIds, checkpoints: Sequence[int], prompt: TokenIds) -> int:
        """The tokens of ``prompt`` a slot holding ``tokens`` (with ``checkpoints``) reuses."""
        n = common_prefix(tokens, prompt)
        if self.swa_tokens and n > 0:
            n = self._swa_past(n, len(tokens), checkpoints, has_new=n < len(prompt))
        if n == len(prompt) and n > 0:
            n -= 1
        return n

    def _swa_past(self, n: int, held: int, checkpoints: Sequence[int], *, has_new: bool) -> int:
        """``n_past`` under a sliding window: ``n`` when the window cache still holds the
        ``swa_tokens`` before it, else the newest usable checkpoint's tokens less one, else 0."""
        thold = max(0, n - self.swa_tokens - (0 if has_new else 1))
        if self._pos_min(held) < thold:
            return n
        for c in reversed(checkpoints):
            c_min = self._pos_min(c)
            if c - 1 <= n and (c_min < thold or c_min == 0):
                return min(n, max(c_min + 1, c - 1), c)
        return 0

    def _pos_min(self, held: int) -> int:
        """The lowest position a window cache of ``swa_cells`` still holds after ``held`` tokens."""
        return max(0, held - self.swa_cells)

    # -- the cache interface the engine model drives --------------------------------------------

    def match(self, tokens: Sequence[object]) -> int:
        """The cached tokens ``tokens`` would get in the slot it would take now (0: none idle)."""
        choice = self.choose(tokens)
        return 0 if choice is None else choice.cached

    def lock(self, tokens: Sequence[object]) -> list[int]:
        """Give ``tokens`` its slot (``choose``): save and restore through RAM as llama.cpp
        does, take the prompt's checkpoints, and hold the slot; returns ``[slot index]``."""
        choice = self.choose(tokens)
        if choice is None:  # only without the scheduler (``fixed`` and ``zero`` timings): no slot
            return []
        slot = choice.slot
        if choice.save_first and self.ram_tokens is not None:
            self._save(slot)
            if choice.entry is not None:
                self.ram.remove(choice.entry)
                slot.tokens, slot.checkpoints = choice.entry.tokens, list(choice.entry.checkpoints)
                self.loaded_tokens += choice.from_ram
            elif choice.cached == 0:
                slot.tokens, slot.checkpoints = array("q"), []
            self._fit_ram()
        n_past = choice.cached
        slot.checkpoints = [c for c in slot.checkpoints if c - 1 <= n_past]
        if self.swa_tokens:
            self._take_checkpoints(slot, n_past, len(tokens))
        slot.tokens = array("q", as_token_ids(tokens))
        slot.busy = True
        if self.cache_idle_slots:
            for idle in self._idle():
                self._save(idle)
                if self.kv_unified:
                    idle.tokens, idle.checkpoints = array("q"), []
            self._fit_ram()
        return [slot.index]

    def _take_checkpoints(self, slot: Slot, n_past: int, prompt_tokens: int) -> None:
        """The checkpoints computing ``[n_past, prompt_tokens)`` leaves (module docstring)."""
        tail = CHECKPOINT_TAIL + self.ubatch_tokens
        taken = [c for c in (prompt_tokens - tail, prompt_tokens - CHECKPOINT_TAIL) if c > n_past]
        if n_past > 0 and prompt_tokens - n_past <= tail:
            taken.insert(0, n_past)
        for c in taken:
            slot.checkpoints = [k for k in slot.checkpoints if k != c][-(CHECKPOINTS_PER_SLOT - 1) :]
            slot.checkpoints.append(c)

    def unlock(self, handle: list[int]) -> None:
        """The request is done with its slot: it is idle, released now."""
        for index in handle:
            self._tick += 1
            slot = self.slots[index]
            slot.busy = False
            slot.last_used = self._tick

    def insert(self, sequence: Sequence[object]) -> int:
        """A finished sequence: the idle slot holding the longest prefix of it now holds all of
        it (the output a request generated stays in its slot). Returns the tokens added."""
        tokens = as_token_ids(sequence)
        best, held = None, 0
        for slot in self._idle():
            n = len(slot.tokens)
            if held < n <= len(tokens) and tokens[:n] == slot.tokens:
                best, held = slot, n
        if best is None:
            return 0
        best.tokens = array("q", tokens)
        return len(tokens) - held

    def reset(self) -> None:
        for slot in self.slots:
            slot.tokens, slot.checkpoints = array("q"), []
        self.ram.clear()

    # -- the host prompt cache -----------------------------------------------------------------

    def _save(self, slot: Slot) -> None:
        """``server_prompt_cache::alloc``: skip a sequence an entry holds whole, drop the
        entries it extends, append it."""
        if not slot.tokens or self.ram_tokens is None:
            return
        tokens = slot.tokens
        if any(common_prefix(e.tokens, tokens) == len(tokens) for e in self.ram):
            return
        self.ram = [e for e in self.ram if common_prefix(e.tokens, tokens) != len(e.tokens)]
        self.ram.append(_Entry(array("q", tokens), list(slot.checkpoints)))

    def _fit_ram(self) -> None:
        """The oldest entries go while the entries hold more than ``ram_tokens``."""
        assert self.ram_tokens is not None
        total = self.ram_size_tokens
        while self.ram and total > self.ram_tokens:
            gone = self.ram.pop(0)
            total -= len(gone.tokens)
            self.evicted_tokens += len(gone.tokens)
