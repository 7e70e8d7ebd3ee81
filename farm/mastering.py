"""The album's last step: each track mastered to one loudness under a true-peak ceiling, tagged, and the whole album
as one gapless FLAC with a cue sheet. The raw renders' audio (`<track>/audio.flac`) is never touched (their tags are
kept current by tags.py).

Per track (`master_track`): integrated loudness by ITU-R BS.1770 (pyloudnorm); a gain to the target (default
−14 LUFS); a look-ahead peak limiter on the 4× oversampled signal (the true peak, as BS.1770 measures it) so the
ceiling (default −1 dBTP) holds; gain and limiting repeated until the loudness is within LOUDNESS_TOLERANCE of the
target. Each mastered track is padded with silence to a whole CD frame (1/75 s = 640 samples at 48 kHz, at most
13 ms), so the cue sheet's indexes fall exactly on the track boundaries of `album.flac`.
Files: `<track>/audio.master.flac` (tagged: title, album, track number and total, artist, style, seed, model
identity, settings key), `album.flac` (every mastered track in order, with the album's tags and the cue sheet
embedded), `album.cue`, and `mastering.json` (what each track measured before and after). Deterministic: the same
renders give the same bytes.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from . import artifacts, tags
from .logs import log

OVERSAMPLE = 4                 # true peak: BS.1770-4 Annex 2 measures on a 4× oversampled signal
LOOKAHEAD_S = 0.005            # the limiter reaches its gain this long before a peak, and holds it as long after
LOUDNESS_TOLERANCE = 0.2       # LU: stop adjusting the gain once this close to the target
MAX_PASSES = 8
CD_FRAME = 75                  # cue sheet frames per second
MASTERED = "audio.master.flac"
ALBUM_FLAC, ALBUM_CUE, REPORT = "album.flac", "album.cue", "mastering.json"


@dataclass(frozen=True)
class MasterSpec:
    lufs: float = -14.0
    true_peak: float = -1.0    # dBTP


def loudness(audio: np.ndarray, rate: int) -> float:
    """Integrated loudness in LUFS (ITU-R BS.1770-4, gated); −inf for silence. A clip shorter than one 400 ms gating
    block is measured repeated to that length (its mean power, which repetition keeps)."""
    import pyloudnorm

    block = int(0.4 * rate) + 1
    if 0 < len(audio) < block:
        audio = np.resize(audio, (block, audio.shape[1]))
    return float(pyloudnorm.Meter(rate).integrated_loudness(audio))


def _oversampled_peaks(audio: np.ndarray) -> np.ndarray:
    """Per input sample, the largest |value| of the 4× oversampled signal around it (any channel)."""
    from scipy.signal import resample_poly

    up = np.abs(resample_poly(audio.astype(np.float32), OVERSAMPLE, 1, axis=0))
    return up.reshape(len(audio), OVERSAMPLE, -1).max(axis=(1, 2))


def true_peak_dbtp(audio: np.ndarray) -> float:
    peak = float(_oversampled_peaks(audio).max()) if len(audio) else 0.0
    return 20 * np.log10(peak) if peak > 0 else -np.inf


def limiter_gain(peaks: np.ndarray, ceiling_dbtp: float, rate: int) -> np.ndarray:
    """Per sample, the smallest gain that keeps every true peak within LOOKAHEAD_S of it under the ceiling, smoothed
    (a minimum over 2·window, then a mean over window: the smoothed gain never exceeds what a peak needs).
    `peaks`: `_oversampled_peaks` of the signal the gain will scale (peaks scale with a plain gain, so they are
    measured once per track)."""
    from scipy.ndimage import minimum_filter1d, uniform_filter1d

    need = np.minimum(1.0, 10 ** (ceiling_dbtp / 20) / np.maximum(peaks, 1e-12))
    window = max(1, int(LOOKAHEAD_S * rate))
    return uniform_filter1d(minimum_filter1d(need, 2 * window + 1, mode="nearest"), window, mode="nearest")


def master_track(audio: np.ndarray, rate: int, spec: MasterSpec) -> tuple[np.ndarray, dict]:
    """→ (mastered float32 audio padded to whole CD frames, what was measured)."""
    source = audio.astype(np.float32)
    peaks = _oversampled_peaks(source)
    before = loudness(source, rate)
    peak_before = 20 * np.log10(peaks.max()) if peaks.max() > 0 else -np.inf
    out, gain_db = source, 0.0
    if np.isfinite(before):
        margin = 0.05                         # dB under the ceiling: the limiter's gain is applied at 1× rate
        gain_db = spec.lufs - before
        for _ in range(MAX_PASSES):
            scale = 10 ** (gain_db / 20)
            out = source * (scale * limiter_gain(scale * peaks, spec.true_peak - margin, rate))[:, None]
            now = loudness(out, rate)
            if abs(now - spec.lufs) <= LOUDNESS_TOLERANCE:
                break
            gain_db += spec.lufs - now
        peak = true_peak_dbtp(out)
        if peak > spec.true_peak:             # what the smoothing let through: a plain gain fixes it
            out = out * 10 ** ((spec.true_peak - peak - 0.01) / 20)
    frame = rate // CD_FRAME
    out = np.concatenate([out, np.zeros((-len(out) % frame, out.shape[1]))]).astype(np.float32)
    def figure(x: float) -> float | None:
        return round(float(x), 3) if np.isfinite(x) else None      # silence measures −inf

    return out, {"lufs_before": figure(before), "true_peak_before": figure(peak_before), "gain_db": figure(gain_db),
                 "lufs": figure(loudness(out, rate)), "true_peak": figure(true_peak_dbtp(out)), "samples": len(out)}


def tagged_flac(audio: np.ndarray, rate: int, comments: dict[str, str], cuesheet: str | None = None) -> bytes:
    """FLAC bytes (PCM 24) with Vorbis comments (and an embedded cue sheet as the CUESHEET comment)."""
    return tags.with_tags(artifacts.flac_bytes(audio, rate), comments, cuesheet)


def cue_sheet(album: str, artist: str | None, titles: list[str], lengths: list[int], rate: int) -> str:
    """album.cue: one FILE, a TRACK per song, INDEX 01 at each start (mm:ss:ff, 75 frames per second)."""
    def quote(text: str) -> str:
        return '"' + text.replace('"', "'") + '"'

    lines = ([f"PERFORMER {quote(artist)}"] if artist else []) + [f"TITLE {quote(album)}",
                                                                  f"FILE {quote(ALBUM_FLAC)} WAVE"]
    start = 0
    for number, (title, length) in enumerate(zip(titles, lengths), start=1):
        frames = start * CD_FRAME // rate
        lines += [f"  TRACK {number:02d} AUDIO", f"    TITLE {quote(title)}",
                  f"    INDEX 01 {frames // (60 * CD_FRAME):02d}:{frames // CD_FRAME % 60:02d}:{frames % CD_FRAME:02d}"]
        start += length
    return "\n".join(lines) + "\n"


class AlbumMaster:
    """Masters tracks on a few driver threads as their decode stage finishes, so the work overlaps the render (a
    reference-length track takes ~10 s of CPU); `finish` writes the album files once the render is over. numpy and
    scipy release the GIL in the heavy parts, and the driver's own loop only waits on Ray."""

    def __init__(self, store, album, jobs, identity: dict, threads: int = 2):
        from concurrent.futures import ThreadPoolExecutor

        self.store, self.album, self.jobs, self.identity = store, album, {j.key: j for j in jobs}, identity
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="master") if album.master else None
        self.futures: dict[str, object] = {}

    def submit(self, key: str) -> None:
        """`key`'s raw render exists: master it (again, if asked twice)."""
        if self.pool is not None and key not in self.futures:
            self.futures[key] = self.pool.submit(self._one, self.jobs[key])

    def _one(self, job) -> tuple[np.ndarray, dict]:
        import soundfile as sf

        audio, rate = sf.read(io.BytesIO(self.store.read_bytes(f"{job.key}/{artifacts.AUDIO}")), dtype="float32",
                              always_2d=True)
        out, measured = master_track(audio, rate, self.album.master)
        comments = tags.track_tags(job, self.album, len(self.jobs), self.identity)
        self.store.write_bytes(f"{job.key}/{MASTERED}", tagged_flac(out, rate, comments))
        return out, measured

    def abandon(self) -> None:
        """The render stopped: start no more tracks (one being mastered finishes; a rerun masters the rest)."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def finish(self, done: set[str]) -> dict | None:
        """Wait for the tracks in `done`; then album.flac and album.cue when every track is done, and
        mastering.json. → that report (None: the album asks for no mastering)."""
        if self.pool is None:
            return None
        for key in done:
            self.submit(key)
        results, errors = {}, {}
        for key in (k for k in self.jobs if k in done):
            try:
                results[key] = self.futures[key].result()
            except OSError:
                raise                          # no room: the render says so, and a rerun completes the album
            except Exception as exc:           # a track that cannot be mastered keeps its raw render
                errors[key] = f"{type(exc).__name__}: {exc}"
                log.error("%s: mastering failed (%s); its raw render is kept", key, errors[key])
        self.pool.shutdown()
        spec = self.album.master
        report = {"target_lufs": spec.lufs, "ceiling_dbtp": spec.true_peak,
                  "tracks": {key: measured for key, (_, measured) in results.items()},
                  **({"errors": errors} if errors else {})}
        if len(results) == len(self.jobs):
            ordered = [(self.jobs[key].title, results[key][0]) for key in self.jobs]
            rate, artist = artifacts.SAMPLE_RATE, self.album.artist
            cue = cue_sheet(self.album.title, artist, [t for t, _ in ordered], [len(a) for _, a in ordered], rate)
            comments = {"TITLE": self.album.title, "ALBUM": self.album.title, **({"ARTIST": artist} if artist else {})}
            self.store.write_bytes(ALBUM_FLAC, tagged_flac(np.concatenate([a for _, a in ordered]), rate, comments,
                                                           cue))
            self.store.write_bytes(ALBUM_CUE, cue.encode("utf-8"))
            report["album_samples"] = sum(len(a) for _, a in ordered)
        self.store.write_bytes(REPORT, artifacts.json_bytes(report))
        return report
