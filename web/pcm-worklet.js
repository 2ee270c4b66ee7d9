// AudioWorklet: microphone float32 at the AudioContext's rate → pcm16 little-endian mono at
// ``targetRate`` (24 kHz), posted to the main thread in frames of ``frameMs``.
//
// Resampling is a windowed-sinc (Blackman) interpolator with its cut-off below the lower of
// the two Nyquist rates, so 48 kHz → 24 kHz does not alias; the kernel is tabulated over 512
// fractional phases. Equal rates pass straight through.

const PHASES = 512;

class Resampler {
  constructor(inRate, outRate) {
    this.step = inRate / outRate; // input samples per output sample
    this.passthrough = inRate === outRate;
    if (this.passthrough) return;
    const fc = 0.5 * Math.min(1, outRate / inRate) * 0.9; // cut-off, cycles per input sample
    this.half = Math.ceil(8 / (2 * fc)); // taps on each side
    const taps = 2 * this.half;
    this.table = new Float32Array(PHASES * taps);
    for (let p = 0; p < PHASES; p++) {
      const frac = p / PHASES;
      let sum = 0;
      for (let j = 0; j < taps; j++) {
        const x = j - this.half + 1 - frac; // distance from the output position to tap j
        const sinc = x === 0 ? 1 : Math.sin(2 * Math.PI * fc * x) / (Math.PI * x) / (2 * fc);
        const w = 0.42 + 0.5 * Math.cos((Math.PI * x) / this.half) + 0.08 * Math.cos((2 * Math.PI * x) / this.half);
        const v = Math.abs(x) >= this.half ? 0 : sinc * w;
        this.table[p * taps + j] = v;
        sum += v;
      }
      for (let j = 0; j < taps; j++) this.table[p * taps + j] /= sum; // unity gain at DC
    }
    this.buf = new Float32Array(this.half); // history: zeros before the first input sample
    this.pos = this.half; // where the next output sample falls in ``buf``
  }

  /** float32 input block → float32 output samples (may be empty). */
  push(input) {
    if (this.passthrough) return input.slice();
    const merged = new Float32Array(this.buf.length + input.length);
    merged.set(this.buf);
    merged.set(input, this.buf.length);
    const taps = 2 * this.half;
    const out = [];
    let pos = this.pos;
    while (Math.floor(pos) + this.half < merged.length) {
      const base = Math.floor(pos);
      const phase = Math.min(PHASES - 1, Math.round((pos - base) * PHASES));
      const row = phase * taps;
      const first = base - this.half + 1;
      let acc = 0;
      for (let j = 0; j < taps; j++) {
        const k = first + j;
        if (k >= 0) acc += merged[k] * this.table[row + j];
      }
      out.push(acc);
      pos += this.step;
    }
    const keepFrom = Math.max(0, Math.floor(pos) - this.half + 1);
    this.buf = merged.slice(keepFrom);
    this.pos = pos - keepFrom;
    return Float32Array.from(out);
  }
}

class Pcm16Capture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.outRate = o.targetRate || 24000;
    this.frameSamples = Math.round((this.outRate * (o.frameMs || 40)) / 1000);
    this.resampler = new Resampler(sampleRate, this.outRate);
    this.frame = new DataView(new ArrayBuffer(this.frameSamples * 2));
    this.fill = 0;
    this.energy = 0;
    this.running = true;
    this.port.onmessage = (e) => {
      if (e.data && e.data.type === "stop") this.running = false;
    };
  }

  process(inputs) {
    if (!this.running) return false;
    const chans = inputs[0];
    if (!chans || chans.length === 0 || chans[0].length === 0) return true;
    let mono = chans[0];
    if (chans.length > 1) {
      mono = new Float32Array(chans[0].length);
      for (const ch of chans) for (let i = 0; i < ch.length; i++) mono[i] += ch[i] / chans.length;
    }
    const out = this.resampler.push(mono);
    for (let i = 0; i < out.length; i++) {
      const v = Math.max(-1, Math.min(1, out[i]));
      this.energy += v * v;
      this.frame.setInt16(this.fill * 2, v < 0 ? v * 32768 : v * 32767, true);
      if (++this.fill === this.frameSamples) {
        const level = Math.sqrt(this.energy / this.frameSamples);
        const buffer = this.frame.buffer;
        this.port.postMessage({ type: "pcm", buffer, level }, [buffer]);
        this.frame = new DataView(new ArrayBuffer(this.frameSamples * 2));
        this.fill = 0;
        this.energy = 0;
      }
    }
    return true;
  }
}

registerProcessor("pcm16-capture", Pcm16Capture);
