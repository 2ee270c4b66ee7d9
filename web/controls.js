// The composer's two stateful controls: the attachment tray (image chips) and the microphone button.

import { prepareImage } from "./attachments.js";
import { Microphone } from "./mic.js";
import { h, notice, rid, ui } from "./views.js";

export class AttachmentTray {
  constructor() {
    this.items = []; // {key, name, dataUrl, chip}
  }

  async add(files) {
    for (const file of files) {
      try {
        const im = await prepareImage(file);
        const key = rid("att_");
        const chip = h("figure", "chip");
        const img = h("img");
        if (im.decoded) img.src = im.dataUrl;
        img.alt = `Attached: ${im.name}`;
        const remove = h("button", "chip-remove", "×");
        remove.type = "button";
        remove.setAttribute("aria-label", `Remove ${im.name}`);
        remove.addEventListener("click", () => {
          this.items = this.items.filter((a) => a.key !== key);
          chip.remove();
          ui.attachments.hidden = this.items.length === 0;
          ui.input.focus();
        });
        chip.append(img, remove);
        ui.attachments.append(chip);
        ui.attachments.hidden = false;
        this.items.push({ key, ...im, chip });
      } catch (err) {
        notice(`Could not attach: ${err.message}.`, "error");
      }
    }
  }

  clear() {
    for (const a of this.items) a.chip.remove();
    this.items = [];
    ui.attachments.hidden = true;
  }
}

export class MicControl {
  // sendAudio(buf): where microphone frames go (the live client, if any); callMic(): the call's own
  // microphone when the client is a WebRTC call (its audio is a media track), else null
  constructor(sendAudio, callMic = () => null) {
    this.sendAudio = sendAudio;
    this.callMic = callMic;
    this.mic = null;
  }

  get active() {
    return this.mic !== null && this.mic.active;
  }

  status(words) {
    ui.voice.textContent = words;
    ui.voice.hidden = !words;
  }

  async toggle() {
    if (this.active) return this.stop();
    this.mic = this.callMic() || new Microphone({
      onFrame: (buf) => this.sendAudio(buf),
      onLevel: (rms) => ui.mic.style.setProperty("--level", String(Math.min(1, rms * 6))),
    });
    ui.mic.disabled = true;
    try {
      await this.mic.start();
      ui.mic.setAttribute("aria-pressed", "true");
      ui.mic.setAttribute("aria-label", "Stop microphone");
      ui.micLabel.textContent = "Mic on";
      this.status("Listening…");
    } catch (err) {
      notice(`The microphone could not start: ${err.message}.`, "error");
    } finally {
      ui.mic.disabled = false;
    }
  }

  async stop() {
    if (this.mic) await this.mic.stop();
    ui.mic.setAttribute("aria-pressed", "false");
    ui.mic.setAttribute("aria-label", "Start microphone");
    ui.micLabel.textContent = "Mic";
    this.status("");
  }
}
