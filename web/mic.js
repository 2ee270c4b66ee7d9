// The microphone: getUserMedia → AudioWorklet (pcm-worklet.js) → pcm16 24 kHz frames.

export class Microphone {
  /**
   * @param {{onFrame: (buf: ArrayBuffer) => void, onLevel?: (rms: number) => void,
   *          targetRate?: number, frameMs?: number}} opts
   */
  constructor({ onFrame, onLevel = () => {}, targetRate = 24000, frameMs = 40 }) {
    this.onFrame = onFrame;
    this.onLevel = onLevel;
    this.targetRate = targetRate;
    this.frameMs = frameMs;
    this.ctx = null;
    this.stream = null;
    this.node = null;
  }

  get active() {
    return this.ctx !== null;
  }

  /** Ask for the microphone and start streaming; throws a readable Error when it cannot. */
  async start() {
    if (this.ctx) return;
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new Error("this browser cannot capture audio here (a secure origin — https or localhost — is needed)");
    }
    if (typeof AudioWorkletNode === "undefined") throw new Error("this browser has no AudioWorklet");
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
    } catch (err) {
      const name = err && err.name;
      if (name === "NotAllowedError") throw new Error("microphone permission was denied");
      if (name === "NotFoundError") throw new Error("no microphone was found");
      throw new Error("the microphone could not be opened" + (err && err.message ? `: ${err.message}` : ""));
    }
    const ctx = new AudioContext(); // the device's rate; the worklet resamples to targetRate
    try {
      await ctx.audioWorklet.addModule(new URL("./pcm-worklet.js", import.meta.url));
      const src = ctx.createMediaStreamSource(stream);
      const node = new AudioWorkletNode(ctx, "pcm16-capture", {
        numberOfInputs: 1,
        numberOfOutputs: 1,
        channelCount: 1,
        channelCountMode: "explicit",
        processorOptions: { targetRate: this.targetRate, frameMs: this.frameMs },
      });
      node.port.onmessage = (e) => {
        if (e.data && e.data.type === "pcm") {
          this.onFrame(e.data.buffer);
          this.onLevel(e.data.level);
        }
      };
      const mute = ctx.createGain(); // keeps the node pulled by the graph without playing the mic back
      mute.gain.value = 0;
      src.connect(node).connect(mute).connect(ctx.destination);
      if (ctx.state === "suspended") await ctx.resume();
      this.ctx = ctx;
      this.stream = stream;
      this.node = node;
    } catch (err) {
      stream.getTracks().forEach((t) => t.stop());
      await ctx.close().catch(() => {});
      throw new Error("audio capture failed to start" + (err && err.message ? `: ${err.message}` : ""));
    }
  }

  async stop() {
    const { ctx, stream, node } = this;
    this.ctx = this.stream = this.node = null;
    if (node) {
      node.port.postMessage({ type: "stop" });
      node.port.onmessage = null;
      node.disconnect();
    }
    if (stream) stream.getTracks().forEach((t) => t.stop());
    if (ctx) await ctx.close().catch(() => {});
    this.onLevel(0);
  }
}
