// The page's map: an equirectangular projection of the space bounds onto a canvas, with a
// graticule and a coarse world outline (a few dozen vertices per continent, drawn from memory
// of the coastlines: orientation, not cartography).  No tiles, no network.
"use strict";

const WORLD = [
  // North America
  [[-168, 66], [-162, 70], [-140, 70], [-120, 72], [-95, 72], [-80, 73], [-65, 60], [-55, 52], [-66, 44],
   [-76, 35], [-81, 31], [-80, 25], [-83, 29], [-90, 30], [-97, 26], [-97, 19], [-90, 21], [-87, 21], [-83, 10],
   [-77, 8], [-80, 7], [-86, 12], [-92, 15], [-105, 20], [-112, 30], [-117, 33], [-124, 40], [-124, 48],
   [-135, 58], [-152, 60], [-165, 60], [-168, 66]],
  // Greenland
  [[-73, 78], [-60, 82], [-30, 83], [-20, 70], [-42, 60], [-52, 64], [-73, 78]],
  // South America
  [[-77, 8], [-60, 10], [-50, 0], [-35, -5], [-39, -15], [-48, -26], [-58, -38], [-65, -45], [-68, -55],
   [-75, -50], [-73, -37], [-70, -18], [-81, -5], [-77, 8]],
  // Eurasia
  [[-10, 36], [-9, 43], [-2, 44], [-5, 48], [5, 53], [10, 57], [5, 62], [15, 69], [30, 71], [45, 68],
   [70, 73], [100, 78], [140, 72], [180, 68], [180, 65], [160, 60], [140, 55], [135, 43], [122, 40], [120, 30],
   [110, 20], [106, 10], [100, 14], [103, 1], [98, 16], [92, 22], [80, 15], [77, 8], [72, 20], [66, 25],
   [57, 25], [50, 30], [48, 29], [52, 24], [58, 22], [44, 12], [35, 28], [34, 31], [36, 36], [28, 36],
   [26, 40], [23, 36], [20, 40], [14, 38], [12, 44], [8, 44], [3, 42], [-2, 37], [-10, 36]],
  // Great Britain
  [[-5, 50], [1, 51], [-2, 56], [-5, 58], [-6, 55], [-5, 50]],
  // Japan
  [[130, 31], [135, 34], [140, 35], [142, 40], [141, 45], [139, 40], [133, 35], [130, 31]],
  // Africa
  [[-17, 21], [-6, 36], [10, 37], [20, 32], [32, 31], [35, 28], [43, 12], [51, 12], [40, -5], [40, -15],
   [33, -26], [20, -35], [15, -27], [12, -5], [9, 4], [-8, 4], [-17, 14], [-17, 21]],
  // Madagascar
  [[44, -25], [47, -25], [50, -15], [49, -12], [44, -17], [44, -25]],
  // Australia
  [[114, -22], [123, -17], [131, -12], [137, -12], [142, -11], [146, -19], [153, -26], [150, -37], [140, -38],
   [132, -32], [115, -34], [114, -22]],
  // New Zealand
  [[172, -34], [178, -38], [174, -41], [167, -46], [172, -34]],
  // Antarctica
  [[-180, -72], [-60, -64], [0, -70], [90, -66], [180, -72], [180, -90], [-180, -90], [-180, -72]],
];

class SkypeMap {
  constructor(canvas) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.bounds = [-180, -90, 180, 90];
  }

  // Fit the view to the world, widened to every point that lies outside it.
  fit(points) {
    let [minx, miny, maxx, maxy] = [-180, -90, 180, 90];
    for (const [x, y] of points) {
      minx = Math.min(minx, x); miny = Math.min(miny, y);
      maxx = Math.max(maxx, x); maxy = Math.max(maxy, y);
    }
    this.bounds = [minx, miny, maxx, maxy];
  }

  project(x, y) {
    const [minx, miny, maxx, maxy] = this.bounds;
    const w = this.canvas.width, h = this.canvas.height;
    return [(x - minx) / (maxx - minx) * w, h - (y - miny) / (maxy - miny) * h];
  }

  unproject(px, py) {
    const [minx, miny, maxx, maxy] = this.bounds;
    const w = this.canvas.width, h = this.canvas.height;
    return [minx + px / w * (maxx - minx), miny + (h - py) / h * (maxy - miny)];
  }

  drawBase() {
    const ctx = this.ctx, w = this.canvas.width, h = this.canvas.height;
    ctx.clearRect(0, 0, w, h);
    ctx.fillStyle = "#dde9f3";
    ctx.fillRect(0, 0, w, h);
    ctx.fillStyle = "#f3efe2";
    ctx.strokeStyle = "#a99f84";
    ctx.lineWidth = 1;
    for (const poly of WORLD) {
      ctx.beginPath();
      poly.forEach(([x, y], i) => {
        const [px, py] = this.project(x, y);
        if (i === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
      });
      ctx.closePath();
      ctx.fill();
      ctx.stroke();
    }
    // graticule every 30 degrees inside the view, labelled at the left and bottom edges
    const [minx, miny, maxx, maxy] = this.bounds;
    ctx.strokeStyle = "rgba(60, 80, 100, 0.25)";
    ctx.fillStyle = "#5b6b7a";
    ctx.font = "10px sans-serif";
    for (let lon = Math.floor(minx / 30) * 30 + 30; lon < maxx; lon += 30) {
      const [px] = this.project(lon, 0);
      ctx.beginPath(); ctx.moveTo(px, 0); ctx.lineTo(px, h); ctx.stroke();
      ctx.fillText(`${lon}°`, px + 2, h - 3);
    }
    for (let lat = Math.floor(miny / 30) * 30 + 30; lat < maxy; lat += 30) {
      const [, py] = this.project(0, lat);
      ctx.beginPath(); ctx.moveTo(0, py); ctx.lineTo(w, py); ctx.stroke();
      ctx.fillText(`${lat}°`, 2, py - 2);
    }
  }

  dot(x, y, radius, fill, stroke) {
    const [px, py] = this.project(x, y);
    const ctx = this.ctx;
    ctx.beginPath();
    ctx.arc(px, py, radius, 0, 2 * Math.PI);
    ctx.fillStyle = fill;
    ctx.fill();
    if (stroke) { ctx.strokeStyle = stroke; ctx.lineWidth = 2; ctx.stroke(); }
  }

  // The point of `points` ({id, x, y}) nearest to a click, within `radius` pixels, or null.
  nearest(points, px, py, radius) {
    let best = null, bestD = radius * radius;
    for (const p of points) {
      const [qx, qy] = this.project(p.x, p.y);
      const d = (qx - px) ** 2 + (qy - py) ** 2;
      if (d <= bestD) { best = p; bestD = d; }
    }
    return best;
  }
}

window.SkypeMap = SkypeMap;
