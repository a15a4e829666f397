// The settings page: the team's secrets, the model keys agent runs use
// (OPENAI_API_KEY by default), and its API keys (keys.js). Values go to
// the server and never come back: the list shows names and when they
// were set.

import {api} from './api.js';
import {busy, confirmButton, fmtTime, h, showError, showNotice} from './dom.js';
import {keysSection} from './keys.js';

export async function settingsView(ctx) {
  const {main, signal} = ctx;
  const name = h('input', {id: 'secret-name', value: 'OPENAI_API_KEY', required: true, pattern: '[A-Za-z_][A-Za-z0-9_]{0,63}', autocomplete: 'off'});
  const value = h('input', {id: 'secret-value', type: 'password', required: true, autocomplete: 'off'});
  const save = h('button', {type: 'submit', class: 'primary', id: 'secret-save'}, 'Save');
  const form = h('form', {class: 'card row-form', 'aria-label': 'Set a secret'},
    h('div', {class: 'field'}, h('label', {for: 'secret-name'}, 'Name'), name),
    h('div', {class: 'field'}, h('label', {for: 'secret-value'}, 'Value'), value),
    h('div', {class: 'field end'}, save));
  const tbody = h('tbody', {id: 'secrets'});
  const empty = h('p', {class: 'muted', id: 'secrets-empty', hidden: true}, 'No secrets yet.');
  main.append(
    h('h1', {}, 'Settings'),
    h('h2', {}, 'Team secrets'),
    h('p', {class: 'muted'}, 'Model keys for agent runs. A run uses the secret named in its settings (OPENAI_API_KEY unless it says otherwise) and sends it only to the model endpoint the run names. Values are kept sealed on the server and are never shown again.'),
    form,
    h('table', {class: 'list', 'aria-label': 'Secrets'},
      h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Set'), h('th', {}, ''))),
      tbody),
    empty);
  const keys = keysSection(ctx);
  main.append(keys);

  const load = async () => {
    try {
      const list = await api('GET', '/v1/secrets', {signal});
      tbody.replaceChildren(...list.secrets.map((sec) => h('tr', {},
        h('td', {}, h('code', {}, sec.name)),
        h('td', {}, fmtTime(sec.updated_at)),
        h('td', {}, confirmButton('Delete', async () => {
          try {
            await api('DELETE', `/v1/secrets/${encodeURIComponent(sec.name)}`, {signal});
            showNotice(`Deleted ${sec.name}.`);
            await load();
          } catch (e) {
            showError(e, `Deleting ${sec.name}`);
          }
        }, {'aria-label': `Delete ${sec.name}`})))));
      empty.hidden = list.secrets.length > 0;
    } catch (e) {
      showError(e, 'Listing secrets');
    }
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(save, 'Saving…', async () => {
      try {
        await api('PUT', `/v1/secrets/${encodeURIComponent(name.value.trim())}`, {body: {value: value.value}, signal});
        value.value = '';
        showNotice(`Saved ${name.value.trim()}.`);
        await load();
      } catch (err) {
        showError(err, 'Saving the secret');
      }
    });
  });
  await Promise.all([load(), keys.load()]);
}
