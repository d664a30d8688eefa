// Tells a customer something: parse the JSON payload, decide, log. The
// refund handler (Python) starts these as follow-up jobs.
//   {"customer": "ada", "message": "your refund is on its way", "channel": "email"}
// hourglass.js is the SDK: `hourglass build` keeps it at the version of the hourglass that builds.
import { handler, fail, retryIn, log } from './hourglass.js';

const CHANNELS = ['email', 'sms'];

export const handle = handler((job) => {
  const { customer, message, channel = 'email' } = job.json();
  if (!customer || !message) {
    return fail('the payload needs a customer and a message');
  }
  if (!CHANNELS.includes(channel)) {
    return fail(`unknown channel ${JSON.stringify(channel)} (${CHANNELS.join(', ')})`);
  }
  if (channel === 'sms' && job.attempt === 1) {
    // the SMS gateway takes a moment after a message is queued: the second try goes through
    return retryIn(1, 'sms gateway busy');
  }
  log.info(`notified ${customer} by ${channel}: ${message}`);
});
